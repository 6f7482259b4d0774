"""Deferred jobs in provider message batches (deferred/services.py decides): the batch claim,
the move to real time, a superseded result, and the undefer.

Part of the job services (jobs/services/__init__.py has the transition table)."""

import logging
import uuid

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from jobs.models import LlmJob
from jobs.services.attempts import _attempt_record
from jobs.services.holds import _schedule_retry
from jobs.services.submit import job_enqueue
from jobs.transitions import Transition, transitions_committed
from ledger.budgets import Reservation, budget_claim
from ledger.services import AttemptRecord, cost_entry_record_attempt

logger = logging.getLogger(__name__)


# --- Deferred jobs: provider message batches (deferred/services.py decides) --------------------


def _in_provider_batch(job: LlmJob) -> bool:
    """Running in a provider batch: no worker, no heartbeat; the deferred loop books it."""
    return (
        job.status == LlmJob.Status.RUNNING
        and job.mode == LlmJob.Mode.DEFERRED
        and job.provider_batch_id is not None
    )


def job_batch_claim(*, jobs: list[tuple[LlmJob, Reservation]], batch_id: int) -> list[LlmJob]:
    """queued|retrying -> running in provider batch ``batch_id``: each deferred job's next
    attempt, its budget reservation (at the batch price) claimed with it. Inside the caller's
    transaction (which also writes the batch's items); one savepoint per job, so a job that
    moved meanwhile or whose reservation was released stays out. Returns the claimed jobs, their
    ``attempts`` the attempt sent."""
    now = timezone.now()
    claimed = []
    for job, reservation in jobs:
        with transaction.atomic():
            if not LlmJob.objects.filter(
                id=job.id,
                status__in=LlmJob.WAITING_STATUSES,
                mode=LlmJob.Mode.DEFERRED,
                attempts=job.attempts,
            ).update(
                status=LlmJob.Status.RUNNING,
                attempts=F("attempts") + 1,
                budget_attempts=F("budget_attempts") + 1,
                started_at=Coalesce(F("started_at"), now),
                heartbeat_at=now,
                next_attempt_at=None,
                provider_batch_id=batch_id,
            ):
                continue
            if not budget_claim(reservation=reservation):
                transaction.set_rollback(True)
                continue
            job.status = LlmJob.Status.RUNNING
            job.attempts += 1
            job.budget_attempts += 1
            job.started_at = job.started_at or now
            job.heartbeat_at, job.next_attempt_at, job.provider_batch_id = now, None, batch_id
            _attempt_record(job, reservation=reservation, batch=True)
        claimed.append(job)
    if claimed:
        transitions_committed(claimed, Transition.CLAIMED)
    return claimed


@transaction.atomic
def job_run_in_real_time(
    *, job_id: uuid.UUID, attempt: int, record: AttemptRecord | None, reason: str
) -> LlmJob | None:
    """running in a provider batch -> retrying at once, in real time (pushed on the llm queue).

    ``record``: the batch attempt's result (expired, cancelled at the provider), booked now.
    None: the batch still runs (the job's deadline is near); its result is booked superseded when
    it comes. None when the job is no longer waiting on that attempt."""
    job = LlmJob.objects.select_for_update().get(id=job_id)
    if not _in_provider_batch(job) or job.attempts != attempt:
        return None
    fields = ["status", "next_attempt_at", "mode", "cost_usd"]
    if record is not None:
        record.retry_delay_seconds = 0.0
        entry = cost_entry_record_attempt(job=job, attempt=attempt, record=record)
        job.cost_usd = job.cost_usd + entry.cost_usd
    logger.warning(
        "job %s runs in real time: its provider batch item %s",
        job.id,
        "ran late for its deadline" if reason == "deadline" else f"ended {reason}",
        extra={"job_id": str(job.id)},
    )
    job.mode = LlmJob.Mode.REALTIME
    return _schedule_retry(job, at=timezone.now(), fields=fields)


@transaction.atomic
def job_batch_superseded(
    *, job_id: uuid.UUID, attempt: int, record: AttemptRecord, moved_to_real_time: bool
) -> LlmJob:
    """Book the result of a batch attempt whose job moved on (to real time, or cancelled): it
    was paid, so the ledger holds it, marked superseded; the job's answer is not changed."""
    job = LlmJob.objects.select_for_update().get(id=job_id)
    record.superseded = True
    if moved_to_real_time:
        # The move was this attempt's retry (its "retrying" transition; metrics/ count it so).
        record.retry_delay_seconds = 0.0
    entry = cost_entry_record_attempt(job=job, attempt=attempt, record=record)
    if entry.cost_usd:
        LlmJob.objects.filter(id=job.id).update(cost_usd=F("cost_usd") + entry.cost_usd)
    return job


@transaction.atomic
def job_undefer(*, job_id: uuid.UUID, reason: str) -> LlmJob | None:
    """A waiting deferred job runs in real time instead, now: its deadline is too near for a
    provider batch. No attempt was sent; the status does not change. None when it moved on."""
    job = LlmJob.objects.select_for_update().get(id=job_id)
    if job.status not in LlmJob.WAITING_STATUSES or job.mode != LlmJob.Mode.DEFERRED:
        return None
    job.mode = LlmJob.Mode.REALTIME
    fields = ["mode"]
    if job.status == LlmJob.Status.RETRYING:
        job.next_attempt_at = timezone.now()
        fields.append("next_attempt_at")
    job.save(update_fields=fields)
    logger.info("job %s runs in real time: %s", job.id, reason, extra={"job_id": str(job.id)})
    job_enqueue(job=job)
    return job
