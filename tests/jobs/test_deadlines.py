"""Job deadlines (jobs/deadlines.py): validated at submit, shown, never a call past them, no
retry or hold past them, and near ones first on the llm queue. Real MariaDB, Redis, RQ workers
and the fake provider."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import django_rq
import pytest
from django.utils import timezone
from rq.job import Job

from dlq.models import FailureRecord
from jobs.models import LlmJob
from jobs.services import job_claim, job_hold
from ledger.models import CostEntry
from tests.conftest import job_body, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def _past_deadline(job: LlmJob) -> None:
    LlmJob.objects.filter(id=job.id).update(deadline=timezone.now() - timedelta(seconds=1))


def _post(client, **overrides):
    return client.post("/api/v1/jobs/", job_body(**overrides), format="json")


# --- Submit -------------------------------------------------------------------------------------


def test_a_job_shows_its_deadline_and_null_without_one(alice_client):
    at = (timezone.now() + timedelta(minutes=10)).replace(microsecond=0)
    job = submit(alice_client, deadline=at.isoformat())
    body = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
    assert job.deadline == at
    assert datetime.fromisoformat(body["deadline"].replace("Z", "+00:00")) == at
    plain = submit(alice_client)
    assert alice_client.get(f"/api/v1/jobs/{plain.id}/").json()["deadline"] is None


def test_deadline_seconds_counts_from_the_submit(alice_client):
    before = timezone.now()
    job = submit(alice_client, deadline_seconds=90)
    assert before + timedelta(seconds=90) <= job.deadline <= timezone.now() + timedelta(seconds=90)


def test_a_naive_deadline_is_utc(alice_client):
    at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0, tzinfo=None)
    job = submit(alice_client, deadline=at.isoformat())
    assert job.deadline == at.replace(tzinfo=UTC)


@pytest.mark.parametrize(
    "fields,field",
    [
        ({"deadline": "2020-01-01T00:00:00Z"}, "deadline"),  # in the past
        ({"deadline": "tomorrow at noon"}, "deadline"),
        ({"deadline": 1767225600}, "deadline"),
        ({"deadline_seconds": 0}, "deadline_seconds"),
        ({"deadline_seconds": -5}, "deadline_seconds"),
        ({"deadline_seconds": "60"}, "deadline_seconds"),
        ({"deadline_seconds": True}, "deadline_seconds"),
        ({"deadline_seconds": 10**9}, "deadline_seconds"),  # more than a month
        ({"deadline": "2999-01-01T00:00:00Z"}, "deadline"),
        # Both at once, even both valid.
        ({"deadline": "2999-01-01T00:00:00Z", "deadline_seconds": 60}, "deadline"),
    ],
)
def test_an_invalid_deadline_is_refused_with_a_stable_code(alice_client, fields, field):
    response = _post(alice_client, **fields)
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_deadline" and body["detail"]["field"] == field
    assert not LlmJob.objects.exists()


def test_a_repeated_submit_with_the_same_deadline_seconds_is_the_same_request(alice_client):
    headers = {"HTTP_IDEMPOTENCY_KEY": "deadline-1"}
    first = alice_client.post(
        "/api/v1/jobs/", job_body(deadline_seconds=60), format="json", **headers
    )
    again = alice_client.post(
        "/api/v1/jobs/", job_body(deadline_seconds=60), format="json", **headers
    )
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    other = alice_client.post(
        "/api/v1/jobs/", job_body(deadline_seconds=61), format="json", **headers
    )
    assert other.status_code == 409


# --- The runner ---------------------------------------------------------------------------------


def test_a_job_past_its_deadline_is_never_called(alice_client, workers, fake_provider):
    job = submit(alice_client, deadline_seconds=60)
    on_time = submit(alice_client, deadline_seconds=60)
    _past_deadline(job)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.error_code == "deadline_exceeded"
    assert job.error_severity == "WARNING" and job.attempts == 0
    assert not CostEntry.objects.filter(job=job).exists()
    record = FailureRecord.objects.get(job=job)
    assert (record.reason_code, record.severity) == ("deadline_exceeded", "WARNING")
    assert "not called" in record.message
    # Only the job within its deadline reached the provider.
    assert fake_provider.stats()["requests"] == 1
    on_time.refresh_from_db()
    assert on_time.status == "completed"
    error = alice_client.get(f"/api/v1/jobs/{job.id}/").json()["error"]
    assert error["code"] == "deadline_exceeded" and "deadline_stopped" not in error


def test_a_job_whose_deadline_passed_since_the_runner_looked_is_not_claimed(alice_client):
    # The runner looked before its wait for the rate limiter; the claim checks again.
    job = submit(alice_client, deadline_seconds=60)
    _past_deadline(job)
    assert job_claim(job_id=str(job.id)) is None
    job.refresh_from_db()
    assert job.status == "queued" and job.attempts == 0


def test_a_retrying_job_past_its_deadline_ends_without_a_second_call(
    alice_client, workers, fake_provider
):
    fake_provider.faults({"529": 1.0})
    job = submit(alice_client, deadline_seconds=60)
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "retrying"
    _past_deadline(job)
    fake_provider.reset()
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.error_code == "deadline_exceeded"
    assert job.attempts == 1 and CostEntry.objects.filter(job=job).count() == 1


def test_a_retry_that_would_land_after_the_deadline_ends_the_job_with_its_last_error(
    alice_client, workers, fake_provider, settings
):
    settings.LLM_RETRY_DELAY_SCALE = 1  # 529: the first retry waits 15 s (+ jitter)
    fake_provider.faults({"529": 1.0})
    job = submit(alice_client, deadline_seconds=10)
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 1
    assert (job.error_code, job.error_http_status) == ("overloaded", 529)
    assert job.deadline_stopped and job.retry_counts == {}
    assert not workers.scheduled()
    record = FailureRecord.objects.get(job=job)
    assert record.reason_code == "overloaded" and record.severity == "ERROR"
    assert not record.retries_exhausted
    assert "would start after its deadline" in record.message
    error = alice_client.get(f"/api/v1/jobs/{job.id}/").json()["error"]
    assert error["code"] == "overloaded" and error["deadline_stopped"] is True
    assert fake_provider.stats()["requests"] == 1


def test_a_retry_before_the_deadline_is_still_scheduled(alice_client, workers, fake_provider):
    fake_provider.faults({"529": 1.0})
    job = submit(alice_client, deadline_seconds=600)  # 15 s scaled by 0.001: well within it
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "retrying" and not job.deadline_stopped
    assert job.next_attempt_at < job.deadline


# --- Holds and the queue ------------------------------------------------------------------------


def _scheduled_at(job: LlmJob) -> datetime:
    queue = django_rq.get_queue("llm")
    registry = queue.scheduled_job_registry
    assert job.rq_job_id in registry.get_job_ids()
    return registry.get_scheduled_time(Job.fetch(job.rq_job_id, connection=queue.connection))


def test_a_hold_is_cut_at_the_deadline(alice_client):
    job = submit(alice_client, deadline_seconds=3)
    job_hold(job_id=job.id, rq_job_id=None, delay_seconds=300, reason="rate limit (test)")
    job.refresh_from_db()
    # The next look comes just after the deadline, not five minutes later.
    assert _scheduled_at(job) <= job.deadline + timedelta(seconds=1.5)
    free = submit(alice_client)
    job_hold(job_id=free.id, rq_job_id=None, delay_seconds=300, reason="rate limit (test)")
    free.refresh_from_db()
    assert _scheduled_at(free) > timezone.now() + timedelta(seconds=250)


def test_a_held_retrying_job_looks_again_by_its_deadline(alice_client):
    job = submit(alice_client, deadline_seconds=5)
    LlmJob.objects.filter(id=job.id).update(
        status=LlmJob.Status.RETRYING, next_attempt_at=timezone.now()
    )
    job_hold(job_id=job.id, rq_job_id=None, delay_seconds=120, reason="concurrency key (test)")
    job.refresh_from_db()
    assert job.next_attempt_at <= job.deadline + timedelta(seconds=1)


def test_a_job_whose_deadline_is_near_goes_to_the_front_of_the_queue(alice_client, settings):
    settings.LLM_DEADLINE_FRONT_SECONDS = 60
    first = submit(alice_client)
    later = submit(alice_client, deadline_seconds=3600)
    urgent = submit(alice_client, deadline_seconds=30)
    ids = django_rq.get_queue("llm").get_job_ids()
    assert ids == [urgent.rq_job_id, first.rq_job_id, later.rq_job_id]


def test_a_budget_defer_past_the_deadline_ends_the_job_without_a_call(
    alice, alice_client, workers, fake_provider
):
    from ledger.models import Budget
    from tests.ledger.test_budgets import FEATURE, feature_budget, one_job_bound, spend

    bound = one_job_bound(alice_client)
    # A month's window resets long after a 60 s deadline.
    budget = feature_budget(limit_usd=bound * 2, period=Budget.Period.MONTH, on_exceed="defer")
    job = submit(alice_client, feature=FEATURE, max_tokens=16, deadline_seconds=60)
    spend(budget, bound * Decimal("1.5"), alice=alice)
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "failed" and job.error_code == "budget_exceeded"
    assert job.deadline_stopped and job.attempts == 0
    assert "would start after its deadline" in FailureRecord.objects.get(job=job).message
    assert fake_provider.stats()["requests"] == 0
