"""A batch's counters, moved inside the transitions of its jobs (registered in apps.py with
``on_transition(..., in_transaction=True)``): they commit or roll back with the job's own state,
so they stay exact whatever number of workers, threads and hosts end jobs at once.

Which transition moves which counter (items, not jobs: a job shared by k identical items moves
k), from the transitions of jobs/services/:

    COMPLETED      running|retrying -> completed   pending   -> completed
    DEAD_LETTERED  running|waiting  -> failed      pending   -> failed
    RECOVERED      running -> failed               pending   -> failed   (-> retrying: nothing)
    CANCELLED      queued|retrying  -> cancelled   pending   -> cancelled
    REQUEUED       failed -> queued                failed    -> pending  (from the DLQ)
    RETRY_SCHEDULED of a job in a stopped batch: its background cancel runs again

The first statement is an ``UPDATE ... SET pending = pending - k, completed = completed + k``
(a lost update is impossible: the database adds, and the row stays locked to the end of the
transaction), then the row is read under that lock. A batch finishes exactly once: a conditional
``UPDATE ... WHERE pending = 0 AND finished_at IS NULL``; only the transaction that wins it
records the callback and publishes ``batch.finished``.

Every transition of every job passes through ``batch_job_transition``: for a job in no batch it
returns without a query (the metadata marker, ``batches.validation.MARKER_KEY``, is absent), and
for the transitions that move nothing it returns at once.
"""

import logging
from uuid import UUID

from django.db.models import Case, Count, F, Value, When
from django.utils import timezone

from batches.events import progress_on_commit
from batches.models import Batch, BatchItem
from batches.services import batch_cancel_jobs_enqueue_on_commit, batch_finished, batch_stop
from batches.validation import MARKER_KEY
from jobs.models import LlmJob
from jobs.transitions import Transition

__all__ = ["batch_job_transition"]

logger = logging.getLogger(__name__)

_WATCHED = frozenset(
    {
        Transition.COMPLETED,
        Transition.DEAD_LETTERED,
        Transition.RECOVERED,
        Transition.CANCELLED,
        Transition.REQUEUED,
        Transition.RETRY_SCHEDULED,
    }
)
_ENDED = {
    LlmJob.Status.COMPLETED: "completed",
    LlmJob.Status.FAILED: "failed",
    LlmJob.Status.CANCELLED: "cancelled",
}


def _in_a_batch(job: LlmJob) -> bool:
    """The marker the batch put in its jobs' metadata, tested without a query. Only a hint (a
    caller could send the key on a plain job): the job's ``BatchItem`` rows decide."""
    if "metadata" not in job.__dict__:
        # Left unread by the caller (a deferred field is missing from the instance's __dict__):
        # reading it would cost a query anyway, so the BatchItem index answers instead.
        return True
    metadata = job.metadata
    return isinstance(metadata, dict) and MARKER_KEY in metadata


def batch_job_transition(job: LlmJob, transition: Transition) -> None:
    """Move the counters of the job's batch; inside the job's transition."""
    if transition not in _WATCHED or not _in_a_batch(job):
        return
    if transition == Transition.REQUEUED:
        move = ("failed", "pending")
    elif transition == Transition.RETRY_SCHEDULED or job.status not in _ENDED:
        # A retry (or a recovery into one) moves no counter, but a stopped batch's background
        # cancel may have passed this job while it ran: it must run again.
        _cancel_again_if_stopped(job)
        return
    else:
        move = ("pending", _ENDED[LlmJob.Status(job.status)])
    shares = (
        BatchItem.objects.filter(job_id=job.id)
        .values_list("batch_id")
        .annotate(items=Count("id"))
        .order_by()
    )
    for batch_id, items in shares:
        _move(batch_id=batch_id, items=items, move=move, job=job)


def _move(*, batch_id: UUID, items: int, move: tuple[str, str], job: LlmJob) -> None:
    source, target = move
    Batch.objects.filter(id=batch_id).update(
        **{source: F(source) - items, target: F(target) + items}
    )
    # Locked by the UPDATE until the transaction ends: these are the counters as it leaves them.
    batch = Batch.objects.select_for_update().get(id=batch_id)
    if target == "failed" and not batch.allow_failures and batch.status == Batch.Status.RUNNING:
        batch_stop(batch=batch, status=Batch.Status.FAILED, reason=f"job {job.id} failed")
    if batch.pending <= 0 and batch.finished_at is None:
        if batch.pending < 0:
            logger.error("batch %s counted %s pending items", batch.id, batch.pending)
        _finish(batch)
    else:
        progress_on_commit(batch)


def _finish(batch: Batch) -> None:
    now = timezone.now()
    finished = Batch.objects.filter(id=batch.id, pending__lte=0, finished_at__isnull=True).update(
        finished_at=now,
        status=Case(
            When(status=Batch.Status.RUNNING, then=Value(Batch.Status.COMPLETED)),
            default=F("status"),
        ),
    )
    if finished:
        batch_finished(batch_id=batch.id)


def _cancel_again_if_stopped(job: LlmJob) -> None:
    stopped = (
        Batch.objects.filter(
            items__job_id=job.id, cancel_requested_at__isnull=False, finished_at__isnull=True
        )
        .values_list("id", flat=True)
        .distinct()
    )
    for batch_id in stopped:
        batch_cancel_jobs_enqueue_on_commit(batch_id=batch_id, if_idle=True)
