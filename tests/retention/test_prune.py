"""Retention (``manage.py llm_prune``, the monitor's daily pass): old jobs', runs' and pipelines'
content emptied; their rows, the ledger, the budgets and the cost report exactly as they were.

On the real stack: jobs run by real RQ workers against the fake provider over HTTP (chat, an
embedding job through its OpenAI-compatible API, an agent run with a tool, a pipeline), MariaDB
and Redis; then their ends moved back in time, as months would."""

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.models import AgentRun, AgentStep
from api.errors import Conflict
from dlq.models import FailureRecord
from embeddings.models import EmbeddingChunk
from jobs.models import LlmJob
from jobs.services import job_requeue
from ledger.models import CostEntry
from pipelines.models import Pipeline, PipelineStep
from retention.services import DAILY_KEY, prune_daily
from tests.agents.conftest import (  # noqa: F401
    AgentWorkers,
    agent_workers,
    call,
    run_body,
    start_run,
)
from tests.conftest import FakeProvider, Workers, make_user, submit
from tests.embeddings.conftest import EMBEDDING_MODEL, local_openai  # noqa: F401
from tests.pipelines.helpers import create_pipeline, three_steps

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

SECRET = "zebra-4471 account number 99-1234"


def _age(days: int) -> Any:
    return timezone.now() - timedelta(days=days)


UNTIL = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")


def _report(client: Any) -> dict[str, Any]:
    reports = {}
    for group_by in ("feature", "model", "user", "day"):
        response = client.get(
            "/api/v1/costs/",
            {"group_by": group_by, "since": "2020-01-01T00:00:00Z", "until": UNTIL},
        )
        assert response.status_code == 200, response.content
        reports[group_by] = response.json()
    return reports


def test_llm_prune_empties_old_content_and_leaves_the_money_exactly_as_it_was(
    alice_client: Any,
    fake_provider: FakeProvider,
    local_openai: str,  # noqa: F811
    agent_workers: AgentWorkers,  # noqa: F811
) -> None:
    from rest_framework.test import APIClient

    workers = Workers()
    old = submit(alice_client, messages=[{"role": "user", "content": f"Classify: {SECRET}"}])
    recent = submit(alice_client, messages=[{"role": "user", "content": f"Classify: {SECRET}"}])
    dead = submit(alice_client, messages=[{"role": "user", "content": f"Fails: {SECRET}"}])
    # Only the calls of ``dead`` (our workers send the job id as the Idempotency-Key) fail.
    fake_provider.http.post("/_fake/faults", json={"next": ["400"], "key": str(dead.id)})
    workers.drain()
    response = alice_client.post(
        "/api/v1/embeddings/",
        {"feature": "search-index", "model": EMBEDDING_MODEL, "input": [SECRET, "hello"]},
        format="json",
    )
    assert response.status_code == 202, response.content
    embedding = LlmJob.objects.get(id=response.json()["id"])
    workers.drain()
    run = start_run(alice_client, run_body([call("add", a=2, b=3)]))
    agent_workers.drain()
    pipeline = create_pipeline(alice_client, three_steps())
    workers.drain()
    for job in (old, recent, dead, embedding):
        job.refresh_from_db()
    run.refresh_from_db()
    pipeline.refresh_from_db()
    assert [old.status, recent.status, dead.status, embedding.status] == [
        "completed",
        "completed",
        "failed",
        "completed",
    ]
    assert run.status == "completed" and pipeline.status == "completed"
    assert FailureRecord.objects.get(job=dead).state == "open"
    assert EmbeddingChunk.objects.filter(job=embedding).exists()
    # Months pass for all but ``recent``.
    turn_jobs = LlmJob.objects.filter(agent_step__run=run)
    step_jobs = LlmJob.objects.filter(pipeline_step__pipeline=pipeline)
    LlmJob.objects.exclude(id=recent.id).update(completed_at=_age(120))
    AgentRun.objects.filter(id=run.id).update(finished_at=_age(120))
    Pipeline.objects.filter(id=pipeline.id).update(finished_at=_age(120))
    staff = APIClient()
    staff.force_authenticate(make_user("sam", "view_costentry", is_staff=True))
    before_report = _report(staff)
    ledger_before = list(CostEntry.objects.order_by("id").values())

    dry = StringIO()
    call_command("llm_prune", "--before", "90d", "--dry-run", stdout=dry)
    assert "would prune" in dry.getvalue()
    assert not LlmJob.objects.filter(pruned_at__isnull=False).exists()
    out = StringIO()
    call_command("llm_prune", "--before", "90d", stdout=out)

    assert "pruned" in out.getvalue() and "agent runs" in out.getvalue()
    assert _report(staff) == before_report
    assert list(CostEntry.objects.order_by("id").values()) == ledger_before
    old.refresh_from_db()
    assert old.pruned_at is not None and old.messages == [] and old.output_text is None
    assert (old.status, old.attempts, old.cost_usd) == ("completed", 1, old.cost_usd)
    assert old.input_tokens and old.output_tokens and old.cost_usd > 0
    body = alice_client.get(f"/api/v1/jobs/{old.id}/").json()
    assert body["pruned_at"] and body["output"] is None and body["cost_usd"] == str(old.cost_usd)
    assert body["usage"]["output_tokens"] == old.output_tokens
    # Kept whole: a job that ended recently, and a dead letter still open.
    for kept in (recent, dead):
        kept.refresh_from_db()
        assert kept.pruned_at is None and SECRET in str(kept.messages)
    assert LlmJob.objects.get(id=recent.id).output_text
    embedding.refresh_from_db()
    assert embedding.pruned_at and embedding.input is None
    assert not EmbeddingChunk.objects.filter(job=embedding).exists()
    run.refresh_from_db()
    assert run.pruned_at and run.messages == [] and run.output is None
    assert not AgentStep.objects.filter(run=run, input__isnull=False).exists()
    assert all(job.pruned_at for job in turn_jobs)
    pipeline.refresh_from_db()
    assert pipeline.pruned_at is not None
    requests = PipelineStep.objects.filter(pipeline=pipeline).values_list("request", flat=True)
    assert all(request == {} for request in requests)
    assert all(job.pruned_at for job in step_jobs)
    assert SECRET not in str(list(LlmJob.objects.filter(pruned_at__isnull=False).values()))
    # A pruned job cannot run again: its prompt is gone.
    with pytest.raises(Conflict) as refused:
        job_requeue(job=LlmJob.objects.get(id=old.id))
    assert refused.value.code == "job_pruned"
    # A second pass finds nothing more.
    again = StringIO()
    call_command("llm_prune", "--before", "90d", stdout=again)
    assert "pruned 0 jobs, 0 agent runs, 0 pipelines" in again.getvalue()


@pytest.mark.parametrize(
    ("before", "message"),
    [("ninety days", "give an age in days"), ("2999-01-01", "in the future")],
)
def test_a_before_that_means_nothing_is_refused(before: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("llm_prune", "--before", before)


def test_the_monitor_prunes_once_a_day_with_llm_retention_days(
    alice_client: Any, fake_provider: FakeProvider, settings: Any
) -> None:
    import django_rq

    job = submit(alice_client)
    Workers().drain()
    LlmJob.objects.filter(id=job.id).update(completed_at=_age(40))
    settings.LLM_RETENTION_DAYS = 0
    assert prune_daily() is None
    settings.LLM_RETENTION_DAYS = 30
    report = prune_daily()
    assert report is not None and report.jobs == 1
    assert LlmJob.objects.get(id=job.id).pruned_at is not None
    assert prune_daily() is None  # once a day, over every monitor
    assert django_rq.get_connection("llm").ttl(DAILY_KEY) > 23 * 3600
