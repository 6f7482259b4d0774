"""An exception inside a run (a 200 whose body is not JSON, a bug in our own code) books the
attempt and sends the job through the retry policy; it never leaves a job ``running``."""

from typing import Any

import pytest

import jobs.services.attempts
from dlq.models import FailureRecord
from jobs.models import LlmJob
from ledger.models import CostEntry
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def poll(client: Any, job: LlmJob) -> dict[str, Any]:
    return client.get(f"/api/v1/jobs/{job.id}/").json()


def entries(job: LlmJob) -> list[CostEntry]:
    return list(CostEntry.objects.filter(job=job).order_by("attempt"))


def test_a_200_that_is_not_json_is_booked_as_an_error_and_retried(
    alice_client, workers, fake_provider
):
    fake_provider.faults({"garbage": 1.0})
    job = submit(alice_client)
    workers.work_once()

    job.refresh_from_db()
    assert job.status == "retrying" and job.attempts == 1 and job.next_attempt_at is not None
    (entry,) = entries(job)
    # The provider did the work and billed it: the attempt is booked at its upper bound.
    assert entry.outcome == "error" and entry.is_estimated and entry.cost_usd > 0
    assert entry.reason_code == "unexpected_error" and entry.error_type == "UnreadableResponse"
    assert entry.retry_delay_seconds is not None
    assert job.cost_usd == entry.cost_usd
    error = poll(alice_client, job)["error"]
    assert error["code"] == "unexpected_error" and error["severity"] == "ERROR"
    # The real cause, not a generic "something went wrong".
    assert error["message"].startswith("Unexpected error during the attempt: UnreadableResponse")
    assert "HTTP 200 with a body that is not a Messages API answer" in error["message"]
    assert "text/html" in error["message"]
    assert len(workers.scheduled()) == 1

    workers.drain()
    job.refresh_from_db()
    # unexpected_error retries twice (3 s, 10 s), then dead-letters.
    assert job.status == "failed" and job.attempts == 3
    booked = entries(job)
    assert [e.attempt for e in booked] == [1, 2, 3]
    assert all(e.outcome == "error" and e.is_estimated for e in booked)
    assert job.cost_usd == sum(e.cost_usd for e in booked)
    (failure,) = FailureRecord.objects.filter(job=job)
    assert failure.reason_code == "unexpected_error" and failure.severity == "ERROR"
    assert failure.retries_exhausted and failure.attempts == 3
    assert "UnreadableResponse" in failure.message
    seen = fake_provider.stats()
    assert seen["requests"] == 3 and seen["by_status"] == {"200": 3}
    assert not LlmJob.objects.filter(status="running").exists()


def test_a_job_whose_first_answer_was_garbage_completes_on_the_retry(
    alice_client, workers, fake_provider
):
    fake_provider.faults({"garbage": 1.0})
    job = submit(alice_client)
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "retrying"

    fake_provider.reset()
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    first, second = entries(job)
    assert (first.outcome, first.is_estimated) == ("error", True)
    assert (second.outcome, second.is_estimated) == ("success", False)
    assert job.cost_usd == first.cost_usd + second.cost_usd
    body = poll(alice_client, job)
    assert body["status"] == "completed" and body["error"] is None
    assert not FailureRecord.objects.filter(job=job).exists()


def test_an_exception_while_recording_the_result_still_leaves_the_job_retrying(
    alice_client, workers, fake_provider, monkeypatch
):
    real_record = jobs.services.attempts.cost_entry_record_attempt
    calls: list[str] = []

    def record_failing_once(*, job: Any, attempt: int, record: Any) -> CostEntry:
        calls.append(record.outcome)
        if len(calls) == 1:
            raise RuntimeError("ledger write exploded")
        return real_record(job=job, attempt=attempt, record=record)

    monkeypatch.setattr(jobs.services.attempts, "cost_entry_record_attempt", record_failing_once)
    job = submit(alice_client)
    workers.work_once()

    job.refresh_from_db()
    # The success could not be booked; its transaction rolled back as a whole, and the attempt
    # went through the retry policy instead of staying "running" with no ledger row.
    assert calls == ["success", "error"]
    assert job.status == "retrying" and job.attempts == 1
    assert job.error_code == "unexpected_error"
    assert "RuntimeError: ledger write exploded" in job.error_message
    assert job.output_text is None
    (entry,) = entries(job)
    assert entry.outcome == "error" and entry.is_estimated
    assert fake_provider.stats()["requests"] == 1

    monkeypatch.setattr(jobs.services.attempts, "cost_entry_record_attempt", real_record)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    assert [e.outcome for e in entries(job)] == ["error", "success"]
