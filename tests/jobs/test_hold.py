"""job_hold: a job that may not start yet goes back on the queue, with no attempt used."""

from datetime import timedelta

import django_rq
import pytest
from django.utils import timezone

from jobs.models import LlmJob
from jobs.services import job_hold
from ledger.models import CostEntry
from llmops.queues import LLM_QUEUE
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_a_held_job_waits_under_a_fresh_rq_job_and_uses_no_attempt(alice_client):
    job = submit(alice_client)
    first_rq_job = job.rq_job_id
    held = job_hold(job_id=job.id, rq_job_id=first_rq_job, delay_seconds=30, reason="test")
    assert held is not None
    job.refresh_from_db()
    assert (job.status, job.attempts, job.budget_attempts) == ("queued", 0, 0)
    assert job.rq_job_id != first_rq_job
    assert not CostEntry.objects.filter(job=job).exists()
    queue = django_rq.get_queue(LLM_QUEUE)
    assert job.rq_job_id in queue.scheduled_job_registry.get_job_ids()
    # The copy that asked is now stale: holding it again changes nothing.
    assert job_hold(job_id=job.id, rq_job_id=first_rq_job, delay_seconds=1, reason="x") is None


def test_a_held_retry_moves_its_due_time(alice_client):
    job = submit(alice_client)
    LlmJob.objects.filter(id=job.id).update(status="retrying", next_attempt_at=timezone.now())
    before = timezone.now()
    job_hold(job_id=job.id, rq_job_id=None, delay_seconds=20, reason="rate limit")
    job.refresh_from_db()
    assert job.status == "retrying"
    assert job.next_attempt_at >= before + timedelta(seconds=19)


def test_a_final_job_is_not_held(alice_client):
    job = submit(alice_client)
    LlmJob.objects.filter(id=job.id).update(status="completed")
    assert job_hold(job_id=job.id, rq_job_id=None, delay_seconds=1, reason="x") is None
