"""Stray RQ copies of a job (requeued by hand from django-rq's failed registry, or duplicated by a
Redis failover) neither run a retrying job early nor start a second retry chain: the claim checks
the RQ job id it was given and the due time. Real RQ jobs, a real worker, the fake provider."""

from datetime import timedelta
from typing import Any

import django_rq
import pytest
from django.utils import timezone
from rq import requeue_job
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry

from jobs.models import LlmJob
from ledger.models import CostEntry
from llmops.queues import LLM_QUEUE, RUN_LLM_JOB_TASK
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.fixture
def retrying_job(alice_client, workers, fake_provider, settings) -> tuple[LlmJob, str]:
    """A job whose first attempt got a 529: ``retrying``, its retry due in 30 s, one scheduled
    RQ job. Returns the job and the id of its first (spent) RQ job."""
    settings.LLM_RETRY_DELAY_SCALE = 1.0
    settings.LLM_RETRY_JITTER = 0.0
    settings.LLM_RETRY_SCHEDULES = {"overloaded": [30]}
    fake_provider.faults({"529": 1.0})
    job = submit(alice_client)
    first_rq_job_id = job.rq_job_id
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "retrying" and job.attempts == 1
    assert job.rq_job_id != first_rq_job_id
    assert 25 < (job.next_attempt_at - timezone.now()).total_seconds() <= 30
    assert [j.id for j in workers.scheduled()] == [job.rq_job_id]
    fake_provider.reset()  # from now on every call would succeed: any call shows
    return job, first_rq_job_id


def enqueue_copy(rq_job_id: str, job: LlmJob) -> Job:
    queue = django_rq.get_queue(LLM_QUEUE)
    return queue.enqueue(RUN_LLM_JOB_TASK, str(job.id), job_id=rq_job_id)


def requeue_from_failed_registry(rq_job_id: str, job: LlmJob) -> Job:
    """What a worker whose work horse died leaves behind, then staff's "requeue" in django-rq."""
    queue = django_rq.get_queue(LLM_QUEUE)
    spent = Job.fetch(rq_job_id, connection=queue.connection)
    spent.set_status(JobStatus.FAILED)
    FailedJobRegistry(queue=queue).add(spent, exc_string="Work-horse terminated unexpectedly")
    return requeue_job(rq_job_id, connection=queue.connection)


def result_of(rq_job_id: str) -> Any:
    return Job.fetch(rq_job_id, connection=django_rq.get_connection(LLM_QUEUE)).return_value()


@pytest.mark.parametrize(
    "bring_back", [enqueue_copy, requeue_from_failed_registry], ids=["by_hand", "failed_registry"]
)
def test_a_copy_of_an_older_rq_job_does_not_run_a_retrying_job(
    retrying_job, workers, fake_provider, bring_back
):
    job, first_rq_job_id = retrying_job
    bring_back(first_rq_job_id, job)
    assert workers.queue.count == 1
    workers.work_once()

    assert result_of(first_rq_job_id) == "skipped"
    assert fake_provider.stats()["requests"] == 0
    before = job.next_attempt_at
    job.refresh_from_db()
    assert job.status == "retrying" and job.attempts == 1 and job.next_attempt_at == before
    # Still one chain: the one scheduled retry the row points at, nothing else.
    assert [j.id for j in workers.scheduled()] == [job.rq_job_id]
    assert workers.queue.count == 0
    assert CostEntry.objects.filter(job=job).count() == 1


def test_a_copy_of_the_current_rq_job_does_not_run_before_the_due_time(
    retrying_job, workers, fake_provider
):
    job, _ = retrying_job
    # A Redis failover can put the scheduled job on the queue early (or twice).
    enqueue_copy(job.rq_job_id, job)
    workers.work_once()

    assert result_of(job.rq_job_id) == "skipped"
    assert fake_provider.stats()["requests"] == 0
    job.refresh_from_db()
    assert job.status == "retrying" and job.attempts == 1
    assert job.next_attempt_at > timezone.now() + timedelta(seconds=25)
    assert CostEntry.objects.filter(job=job).count() == 1


def test_after_the_due_time_the_retry_runs_exactly_once(retrying_job, workers, fake_provider):
    job, first_rq_job_id = retrying_job
    # Thirty seconds pass.
    LlmJob.objects.filter(id=job.id).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    # The retry is due now, yet a copy of the first RQ job still may not run it: only the RQ
    # job the row points at starts the attempt (no second chain beside the scheduled one).
    enqueue_copy(first_rq_job_id, job)
    workers.work_once()
    assert result_of(first_rq_job_id) == "skipped"
    assert fake_provider.stats()["requests"] == 0
    job.refresh_from_db()
    assert job.status == "retrying" and job.attempts == 1

    # The scheduled retry and a failover duplicate of it show up together: one attempt.
    enqueue_copy(job.rq_job_id, job)
    assert workers.release_scheduled() == 1
    assert workers.queue.count == 2
    workers.drain()

    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    assert fake_provider.stats()["requests"] == 1  # since the 529; two in all
    assert [e.outcome for e in CostEntry.objects.filter(job=job).order_by("attempt")] == [
        "error_response",
        "success",
    ]
    assert workers.scheduled() == [] and workers.queue.count == 0


def test_a_copy_of_a_completed_job_never_calls_the_provider(retrying_job, workers, fake_provider):
    job, first_rq_job_id = retrying_job
    LlmJob.objects.filter(id=job.id).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    workers.release_scheduled()
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2

    for rq_job_id in (first_rq_job_id, job.rq_job_id):
        requeue_from_failed_registry(rq_job_id, job)
        workers.work_once()
        assert result_of(rq_job_id) == "skipped"
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    assert fake_provider.stats()["requests"] == 1
