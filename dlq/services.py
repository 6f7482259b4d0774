"""Writes on the dead-letter queue, and "requeue all matching" run in the background.

A job's record is written by ``failure_on_transition``, subscribed to the job's transitions
inside their transaction (dlq/apps.py), from the ``DeadLetter`` the transition carries; what
follows a record (its alert) hears of it through dlq/hooks.py.

A bulk requeue (``BulkRequeue``) snapshots the open records of a selection, then an RQ job on the
default queue walks them in batches with ``failure_requeue``, counting its progress in the row.
The row is the source of truth: a lost or killed RQ job is put back by ``bulk_requeues_resume``
(a monitor pass) and continues where the last committed batch left off.
"""

import logging
from dataclasses import asdict
from datetime import timedelta

import django_rq
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone
from rq.timeouts import BaseTimeoutException

from api.errors import ApplicationError, Conflict, ValidationFailed
from dlq.hooks import failure_handled, failure_recorded
from dlq.models import BulkRequeue, FailureRecord
from jobs.dead_letter import dead_letter_of
from jobs.models import LlmJob
from jobs.services import job_requeue
from jobs.transitions import Transition
from ledger.selectors import price_for_model, unknown_model_error
from llmops.queues import DEFAULT_QUEUE, REQUEUE_MATCHING_TASK, bulk_requeue_job_id
from runtime.rq_jobs import rq_jobs_resume

__all__ = [
    "BULK_REQUEUE_BATCH",
    "BULK_REQUEUE_GRACE_SECONDS",
    "BULK_REQUEUE_JOB_TIMEOUT",
    "bulk_requeue_enqueue",
    "bulk_requeue_run",
    "bulk_requeue_start",
    "bulk_requeues_resume",
    "failure_close",
    "failure_on_transition",
    "failure_record_create",
    "failure_requeue",
]

logger = logging.getLogger(__name__)


def failure_record_create(
    *,
    job: LlmJob,
    severity: str,
    reason_code: str,
    retries_exhausted: bool = False,
    http_status: int | None = None,
    error_type: str = "",
    message: str = "",
    request_id: str = "",
) -> FailureRecord:
    """Dead-letter a job. The snapshot holds the request as sent, never credentials."""
    record = FailureRecord.objects.create(
        job=job,
        severity=severity,
        reason_code=reason_code,
        retries_exhausted=retries_exhausted,
        http_status=http_status,
        error_type=error_type,
        message=message[:5000],
        request_id=request_id,
        attempts=job.attempts,
        request_snapshot={
            **job.provider_request(),
            "feature": job.feature,
            "metadata": job.metadata,
        },
    )
    # Its alert is raised on the alerts queue after commit (alerts/apps.py subscribes).
    failure_recorded(record)
    return record


def failure_on_transition(job: LlmJob, transition: Transition) -> None:
    """Dead-letter the job whose transition into ``failed`` carries a ``DeadLetter``: inside
    that transition, so the record commits or rolls back with the job's ``failed`` state."""
    if transition not in (Transition.DEAD_LETTERED, Transition.RECOVERED):
        return
    dead_letter = dead_letter_of(job)
    if dead_letter is None or job.status != LlmJob.Status.FAILED:
        return
    failure_record_create(job=job, **asdict(dead_letter))


@transaction.atomic
def failure_requeue(
    *, record: FailureRecord, by: User | None = None, model: str | None = None
) -> bool:
    """Requeue the record's job with a fresh retry budget, optionally on another model.

    Idempotent: a record requeued twice runs once (the second call returns False). A resolved or
    ignored record is refused: it was closed on purpose.
    """
    record = FailureRecord.objects.select_for_update().select_related("job").get(id=record.id)
    if record.state == FailureRecord.State.REQUEUED:
        return False
    if record.state != FailureRecord.State.OPEN:
        raise Conflict(
            f"This failure is {record.state}; only open failures can be requeued.",
            code="failure_not_open",
            detail={"state": record.state},
        )
    previous_model = record.job.model
    moved = job_requeue(job=record.job, model=model)
    record.state = FailureRecord.State.REQUEUED
    record.handled_at = timezone.now()
    record.handled_by = by
    record.requeued_model = model if model and model != previous_model else ""
    record.save(update_fields=["state", "handled_at", "handled_by", "requeued_model"])
    # If this was its fingerprint's last open record, the alerts worker resolves the incident.
    failure_handled(record)
    logger.info("failure %s requeued by %s (job moved: %s)", record.id, by, moved)
    return moved


@transaction.atomic
def failure_close(
    *,
    record: FailureRecord,
    by: User | None = None,
    comment: str = "",
    state: str = FailureRecord.State.RESOLVED,
) -> bool:
    """Close an open record as resolved or ignored, recording who did it, when and why.

    Returns False when it already is in that state; another closed state is a conflict.
    """
    if state not in (FailureRecord.State.RESOLVED, FailureRecord.State.IGNORED):
        raise ValidationFailed(
            "state must be 'resolved' or 'ignored'.", code="invalid_state", detail={"state": state}
        )
    current = FailureRecord.objects.select_for_update().get(id=record.id)
    if current.state == state:
        return False
    if current.state != FailureRecord.State.OPEN:
        raise Conflict(
            f"This failure is already {current.state}.",
            code="failure_not_open",
            detail={"state": current.state},
        )
    current.state = state
    current.handled_at = timezone.now()
    current.handled_by = by
    current.comment = comment[:5000]
    current.save(update_fields=["state", "handled_at", "handled_by", "comment"])
    # If this was its fingerprint's last open record, the alerts worker resolves the incident.
    failure_handled(current)
    logger.info("failure %s %s by %s", record.id, state, by)
    record.refresh_from_db()
    return True


# --- requeue all matching, in the background ---------------------------------------------------

BULK_REQUEUE_BATCH = 200
"""Records requeued between two progress updates: each is its own short transaction, so a batch
takes a second or two and the progress page (refreshed every 2 s) moves at a readable pace."""
BULK_REQUEUE_JOB_TIMEOUT = 3600
"""Seconds one RQ job may walk a selection (about half a million records at a few ms each). A
job killed on timeout leaves the row running; the resume sweep continues it from ``processed``."""
BULK_REQUEUE_GRACE_SECONDS = 60.0
"""A bulk requeue this old whose RQ job is gone from Redis lost it (flush, failover, an enqueue
that failed after commit): the enqueue runs milliseconds after the row is created."""


@transaction.atomic
def bulk_requeue_start(
    *,
    records: QuerySet[FailureRecord],
    by: User | None = None,
    model: str | None = None,
    description: str = "",
) -> BulkRequeue:
    """Record a requeue of every open record of ``records`` and queue it for a worker.

    Only the ids are read here (one query), so the request returns at once whatever the size of
    the selection; the work runs in ``bulk_requeue_run`` on the default queue. An unknown model is
    refused up front, as the single requeue refuses it.
    """
    if model:
        _check_model(model=model)
    record_ids = list(
        records.filter(state=FailureRecord.State.OPEN)
        .order_by("id")
        .values_list("id", flat=True)
        .distinct()
    )
    bulk = BulkRequeue.objects.create(
        created_by=by,
        description=description[:500],
        model=model or "",
        record_ids=record_ids,
        total=len(record_ids),
    )
    # robust: a Redis error must not fail the request; the row is pending, and the monitor's
    # bulk_requeues_resume enqueues it again.
    transaction.on_commit(lambda: bulk_requeue_enqueue(bulk_id=bulk.id), robust=True)
    logger.info("bulk requeue %s of %s record(s) started by %s", bulk.id, bulk.total, by)
    return bulk


def bulk_requeue_enqueue(*, bulk_id: int) -> None:
    django_rq.get_queue(DEFAULT_QUEUE).enqueue(
        REQUEUE_MATCHING_TASK,
        bulk_id,
        job_id=bulk_requeue_job_id(bulk_id),
        job_timeout=BULK_REQUEUE_JOB_TIMEOUT,
        description=f"bulk requeue {bulk_id}",
    )


def bulk_requeue_run(*, bulk_id: int) -> str:
    """Requeue the records of a bulk requeue, batch by batch; returns a one-line summary.

    Claims the row (pending -> running), or resumes a running one whose RQ job died, and
    continues from ``processed``. Each record is requeued in its own transaction, so one bad
    record (an ``ApplicationError``: already handled, a model its request does not fit) is
    counted as skipped and undoes nothing. Progress is written after each batch with a
    conditional update: a second copy of the job that lost the race stops there. Requeue is
    idempotent, so records a killed run requeued before its last progress write are skipped,
    not requeued twice.
    """
    now = timezone.now()
    claimed = BulkRequeue.objects.filter(id=bulk_id, state=BulkRequeue.State.PENDING).update(
        state=BulkRequeue.State.RUNNING, started_at=now
    )
    bulk = BulkRequeue.objects.select_related("created_by").filter(id=bulk_id).first()
    if bulk is None:
        return f"bulk requeue {bulk_id} is gone"
    if bulk.state != BulkRequeue.State.RUNNING:
        return f"bulk requeue {bulk_id} is {bulk.state}; nothing to do"
    if not claimed:
        logger.warning("bulk requeue %s resumed at %s/%s", bulk_id, bulk.processed, bulk.total)
    try:
        while bulk.processed < bulk.total:
            if not _bulk_requeue_batch(bulk=bulk):
                return f"bulk requeue {bulk_id}: another run took over"
    except BaseTimeoutException:
        # Left running: the resume sweep continues it from the last batch written.
        raise
    except Exception as exc:
        BulkRequeue.objects.filter(id=bulk_id, state=BulkRequeue.State.RUNNING).update(
            state=BulkRequeue.State.FAILED,
            last_error=f"{type(exc).__name__}: {exc}"[:5000],
            finished_at=timezone.now(),
        )
        logger.exception("bulk requeue %s failed at %s/%s", bulk_id, bulk.processed, bulk.total)
        raise
    finished = BulkRequeue.objects.filter(
        id=bulk_id, state=BulkRequeue.State.RUNNING, processed=bulk.total
    ).update(state=BulkRequeue.State.FINISHED, finished_at=timezone.now())
    summary = f"bulk requeue {bulk_id}: {bulk.moved} moved, {bulk.skipped} skipped of {bulk.total}"
    if finished:
        logger.info(summary)
    return summary


def _bulk_requeue_batch(*, bulk: BulkRequeue) -> bool:
    """Requeue the next batch and write the progress; False if another run wrote it first."""
    start = bulk.processed
    batch = bulk.record_ids[start : start + BULK_REQUEUE_BATCH]
    model = bulk.model or None
    moved = 0
    # Only the ids: failure_requeue locks and reads each record itself.
    for record in FailureRecord.objects.filter(id__in=batch).only("id").order_by("id"):
        try:
            moved += failure_requeue(record=record, by=bulk.created_by, model=model)
        except ApplicationError as exc:
            logger.info("bulk requeue %s: failure %s skipped: %s", bulk.id, record.id, exc.message)
    # A record that vanished, was already handled or was refused counts as skipped.
    skipped = len(batch) - moved
    written = BulkRequeue.objects.filter(
        id=bulk.id, state=BulkRequeue.State.RUNNING, processed=start
    ).update(
        processed=start + len(batch),
        moved=F("moved") + moved,
        skipped=F("skipped") + skipped,
    )
    if not written:
        return False
    bulk.processed = start + len(batch)
    bulk.moved += moved
    bulk.skipped += skipped
    return True


def bulk_requeues_resume(*, grace_seconds: float = BULK_REQUEUE_GRACE_SECONDS) -> int:
    """Enqueue again the pending or running bulk requeues whose RQ job is gone from Redis (flush,
    failover, an enqueue that failed) or died (killed worker, timeout). Returns how many.

    A job still queued or started is left alone, so passes do not pile up copies; a copy that
    runs anyway continues from ``processed`` and stops at the first progress write it loses.
    """
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    ids = list(
        BulkRequeue.objects.filter(
            state__in=[BulkRequeue.State.PENDING, BulkRequeue.State.RUNNING],
            created_at__lt=cutoff,
        )
        .order_by("id")
        .values_list("id", flat=True)
    )
    if not ids:
        return 0
    resumed = rq_jobs_resume(
        queue=django_rq.get_queue(DEFAULT_QUEUE),
        ids=ids,
        job_id_for=bulk_requeue_job_id,
        enqueue=lambda bulk_id: bulk_requeue_enqueue(bulk_id=bulk_id),
    )
    if resumed:
        logger.warning("re-enqueued %s bulk requeue(s) whose RQ job was lost", resumed)
    return resumed


def _check_model(*, model: str) -> None:
    # The same refusal as the single requeue (jobs.services.job_requeue); max_tokens is per job,
    # so a request that does not fit the model is refused per record and counted as skipped.
    if price_for_model(model=model) is None:
        raise unknown_model_error(model)
