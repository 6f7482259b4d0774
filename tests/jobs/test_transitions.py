"""Every transition ends in one after-commit hook; transitions write only what they change."""

import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import transitions
from jobs.models import LlmJob
from jobs.services import job_cancel
from jobs.timeouts import job_timeout_for
from jobs.transitions import Transition, on_transition
from providers.limits import call_deadline_for, read_timeout_for
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.fixture
def heard() -> Any:
    events: list[tuple[str, str, str]] = []

    def listen(job: LlmJob, transition: Transition) -> None:
        events.append((str(job.id), transition.value, job.status))

    on_transition(listen)
    yield events
    transitions._subscribers.remove(listen)


def test_every_transition_reaches_the_hook_after_commit_in_order(
    alice_client, workers, fake_provider, heard
):
    fake_provider.faults({"529": 1.0})
    job = submit(alice_client)
    workers.work_once()
    fake_provider.reset()
    workers.drain()
    job_id = str(job.id)
    assert [(t, s) for i, t, s in heard if i == job_id] == [
        ("submitted", "queued"),
        ("claimed", "running"),
        ("retry_scheduled", "retrying"),
        ("claimed", "running"),
        ("completed", "completed"),
    ]


def test_dead_letter_cancel_and_requeue_reach_the_hook(alice_client, workers, fake_provider, heard):
    from dlq.services import failure_requeue

    fake_provider.faults({"400": 1.0})
    failed = submit(alice_client)
    workers.drain()
    waiting = submit(alice_client)
    job_cancel(job=waiting)
    failure_requeue(record=failed.failures.get())
    events = [(t, s) for _, t, s in heard]
    assert ("dead_lettered", "failed") in events
    assert ("cancelled", "cancelled") in events
    assert events[-1] == ("requeued", "queued")


def test_a_failing_subscriber_fails_nothing(alice_client, workers, heard):
    def broken(job: LlmJob, transition: Transition) -> None:
        raise RuntimeError("subscriber bug")

    on_transition(broken)
    try:
        job = submit(alice_client)
        workers.drain()
    finally:
        transitions._subscribers.remove(broken)
    job.refresh_from_db()
    assert job.status == "completed"
    assert [t for _, t, _ in heard][-1] == "completed"


def test_an_in_transaction_subscriber_writes_with_the_transition_and_can_refuse_it(alice_client):
    from django.db import connection as conn

    seen: list[tuple[str, bool]] = []

    def inside(job: LlmJob, transition: Transition) -> None:
        seen.append((transition.value, conn.in_atomic_block))
        if job.metadata.get("refuse") and transition == Transition.CANCELLED:
            raise RuntimeError("refused")

    on_transition(inside, in_transaction=True)
    try:
        job = submit(alice_client)
        job_cancel(job=job)
        refused = submit(alice_client, metadata={"refuse": True})
        with pytest.raises(RuntimeError):
            job_cancel(job=refused)
    finally:
        transitions._in_transaction.remove(inside)
    assert seen[:2] == [("submitted", True), ("cancelled", True)]
    refused.refresh_from_db()
    assert refused.status == "queued"


def test_a_rolled_back_transition_notifies_nobody(alice_client, heard):
    from django.db import transaction

    job = submit(alice_client)
    heard.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        job_cancel(job=job)
        raise RuntimeError("roll back")
    assert heard == []
    job.refresh_from_db()
    assert job.status == "queued"


def unquoted(queries: CaptureQueriesContext) -> list[str]:
    """The captured statements without the quotes of names (MariaDB's backticks, PostgreSQL's
    double quotes), so one assertion reads both."""
    return [q["sql"].replace("`", "").replace('"', "") for q in queries.captured_queries]


def job_columns(sql: str) -> set[str]:
    return set(re.findall(r"jobs_llmjob\.(\w+)", sql))


def test_transitions_write_only_the_fields_they_change(alice_client, workers, fake_provider):
    job = submit(alice_client)
    with CaptureQueriesContext(connection) as queries:
        workers.work_once()
    updates = [sql for sql in unquoted(queries) if sql.startswith("UPDATE jobs_llmjob")]
    assert updates, "the run wrote nothing?"
    for sql in updates:
        assert " messages " not in sql and " metadata " not in sql and " system " not in sql
    job.refresh_from_db()
    assert job.status == "completed"


def test_lists_never_load_the_request_columns(alice_client):
    submit(alice_client)
    with CaptureQueriesContext(connection) as queries:
        response = alice_client.get("/api/v1/jobs/")
    assert response.status_code == 200
    (select,) = [
        sql for sql in unquoted(queries) if "FROM jobs_llmjob" in sql and "COUNT" not in sql
    ]
    assert not {"messages", "metadata"} & job_columns(select)


def test_the_admin_job_list_never_loads_large_columns(alice_client, client, django_user_model):
    submit(alice_client)
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/admin/jobs/llmjob/")
    assert response.status_code == 200
    selects = [sql for sql in unquoted(queries) if "FROM jobs_llmjob" in sql]
    assert selects and all(not {"messages", "output_text"} & job_columns(s) for s in selects)


def test_the_call_deadline_and_job_timeout_scale_with_max_tokens(settings):
    settings.LLM_STREAM_IDLE_SECONDS = 60.0
    settings.LLM_CALL_DEADLINE_SCALE = 2.0
    settings.LLM_JOB_TIMEOUT = 240
    assert read_timeout_for(256) == read_timeout_for(128_000) == 60.0  # the idle bound
    connect = settings.LLM_PROVIDER_CONNECT_TIMEOUT
    assert call_deadline_for(256) == connect + 60.0  # the idle bound outweighs the generation
    # Twice the SDK's pace (an hour per 128k tokens): two hours for Opus's whole output.
    assert call_deadline_for(128_000) == pytest.approx(connect + 2 * 3600)
    for max_tokens in (1, 4096, 21_334, 64_000, 128_000):
        assert job_timeout_for(max_tokens) > call_deadline_for(max_tokens)  # RQ never kills it


def test_the_rq_job_carries_the_scaled_timeout(alice_client, workers, settings):
    settings.LLM_STREAM_IDLE_SECONDS = 60.0
    job = submit(alice_client, model="claude-opus-4-6", max_tokens=16_000)
    (rq_job,) = workers.queue.get_jobs()
    assert rq_job.id == job.rq_job_id
    assert rq_job.timeout == job_timeout_for(16_000) and rq_job.timeout > 450
