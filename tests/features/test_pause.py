"""Pause and resume (issue 43): a paused feature's or provider's jobs are accepted and wait
(``queued``, a ``held_reason``, no RQ job), nothing is sent and nothing reserved; resumed, they
run in the order they were submitted.

On the real stack: real RQ workers (in this process), the fake provider over HTTP, MariaDB and
Redis; the API, the commands and the admin's actions as staff use them."""

from io import StringIO
from typing import Any

import django_rq
import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from deferred.flush import deferred_flush
from deferred.models import ProviderBatch
from jobs.models import JobAttempt, LlmJob
from jobs.reconciler import requeue_waiting_jobs
from keys.testing import api_key_for
from ledger.models import CostEntry
from tests.conftest import FakeProvider, Workers, make_user, submit
from tests.metrics.test_metrics import metrics_settings, scrape  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

URL = "/api/v1/features/summarize/"


@pytest.fixture
def editor() -> APIClient:
    client = APIClient()
    user = make_user("editor", "change_featurepolicy", "view_featurepolicy", is_staff=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_for(user)}")
    return client


def _requests(fake_provider: FakeProvider) -> int:
    return int(fake_provider.stats()["requests"])


def test_a_paused_features_jobs_wait_with_nothing_sent_and_run_in_order_when_resumed(
    alice_client: Any,
    editor: APIClient,
    fake_provider: FakeProvider,
    metrics_settings: Any,  # noqa: F811
) -> None:
    workers = Workers()
    response = editor.put(URL, {"paused": True}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["paused"] is True
    waiting = [submit(alice_client, feature="summarize") for _ in range(3)]
    other = submit(alice_client, feature="translate")
    workers.drain()
    other.refresh_from_db()
    assert other.status == "completed"
    assert _requests(fake_provider) == 1
    for job in waiting:
        job.refresh_from_db()
        assert (job.status, job.held_reason, job.attempts, job.rq_job_id) == (
            "queued",
            "feature_paused",
            0,
            "",
        )
        body = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
        assert body["status"] == "queued" and body["held_reason"] == "feature_paused"
    # Nothing claimed, nothing booked, nothing reserved.
    assert not JobAttempt.objects.filter(job__in=waiting).exists()
    assert not CostEntry.objects.filter(job__in=waiting).exists()
    assert editor.get(URL).json()["waiting"] == 3
    # The reconciler leaves parked jobs alone: they have no RQ job on purpose.
    report = requeue_waiting_jobs(grace_seconds=0)
    assert report.requeued_lost == 0 and django_rq.get_queue("llm").count == 0
    metrics = scrape()
    assert 'llm_paused{kind="feature",name="summarize"} 1.0' in metrics
    assert 'llm_jobs_held{reason="feature_paused"} 3.0' in metrics

    response = editor.put(URL, {"paused": False}, format="json")
    assert response.status_code == 200 and response.json()["paused"] is False
    queued = django_rq.get_queue("llm").get_job_ids()
    assert queued == [LlmJob.objects.get(id=job.id).rq_job_id for job in waiting]
    workers.drain()
    started = []
    for job in waiting:
        job.refresh_from_db()
        assert (job.status, job.held_reason) == ("completed", "")
        started.append(job.started_at)
    assert started == sorted(started)
    assert _requests(fake_provider) == 4
    assert 'llm_jobs_held{reason="feature_paused"} 0.0' in scrape()


def test_a_paused_providers_jobs_wait_and_run_when_it_is_resumed(
    alice_client: Any, fake_provider: FakeProvider
) -> None:
    workers = Workers()
    out = StringIO()
    call_command("llm_provider", "pause", "anthropic", stdout=out)
    assert "provider anthropic paused" in out.getvalue()
    job = submit(alice_client)
    workers.drain()
    job.refresh_from_db()
    assert (job.status, job.held_reason) == ("queued", "provider_paused")
    assert _requests(fake_provider) == 0
    listing = StringIO()
    call_command("llm_provider", "list", stdout=listing)
    assert "PAUSED" in listing.getvalue()
    call_command("llm_provider", "resume", "anthropic", stdout=StringIO())
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and _requests(fake_provider) == 1
    with pytest.raises(CommandError, match="No provider named"):
        call_command("llm_provider", "pause", "antropic")


def test_llm_feature_pauses_shows_and_resumes(alice_client: Any, fake_provider: Any) -> None:
    out = StringIO()
    call_command("llm_feature", "pause", "summarize", stdout=out)
    job = submit(alice_client, feature="summarize")
    Workers().drain()
    shown = StringIO()
    call_command("llm_feature", "show", "summarize", stdout=shown)
    assert "feature summarize paused: 1 jobs wait" in shown.getvalue()
    call_command("llm_feature", "resume", "summarize", stdout=out)
    Workers().drain()
    job.refresh_from_db()
    assert job.status == "completed"
    with pytest.raises(CommandError, match="slug"):
        call_command("llm_feature", "pause", "Not A Slug")


def test_paused_must_be_a_boolean(editor: APIClient) -> None:
    response = editor.put(URL, {"paused": "yes"}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_paused"


def test_a_paused_features_deferred_jobs_are_not_sent_in_a_batch(
    alice_client: Any, fake_provider: FakeProvider
) -> None:
    call_command("llm_feature", "pause", "summarize", stdout=StringIO())
    job = submit(alice_client, feature="summarize", model="claude-haiku-4-5", mode="deferred")
    report = deferred_flush(force=True)
    job.refresh_from_db()
    assert job.provider_batch_id is None and job.status == "queued"
    assert not ProviderBatch.objects.exists()
    call_command("llm_feature", "resume", "summarize", stdout=StringIO())
    deferred_flush(force=True)
    job.refresh_from_db()
    assert job.provider_batch_id is not None, report
