"""Writes on the dead-letter queue."""

import logging

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from alerts.dispatch import failure_alert_enqueue
from alerts.models import FailureRecord
from alerts.notifications import failure_handled_hook
from jobs.models import LlmJob
from jobs.services import job_requeue
from llmops.errors import ApplicationError, Conflict, ValidationFailed

__all__ = [
    "failure_close",
    "failure_record_create",
    "failure_requeue",
    "failure_requeue_matching",
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
    # The alert is raised on the alerts queue after commit: never inside the LLM job, never for
    # a rolled-back record. robust: a Redis error must not fail a job already committed failed;
    # the monitor's alert_failures_resume finds the record unalerted and enqueues it again.
    transaction.on_commit(lambda: failure_alert_enqueue(failure_id=record.id), robust=True)
    return record


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
    failure_handled_hook(failure=record)
    logger.info("failure %s requeued by %s (job moved: %s)", record.id, by, moved)
    return moved


def failure_requeue_matching(
    *, records: QuerySet[FailureRecord], by: User | None = None, model: str | None = None
) -> int:
    """Requeue every open record of a filtered set; returns how many jobs moved.

    Each record goes through ``failure_requeue`` in its own transaction, so one bad record (say,
    a model change its request does not fit) does not undo the others.
    """
    ids = list(records.filter(state=FailureRecord.State.OPEN).values_list("id", flat=True))
    moved = 0
    for record in FailureRecord.objects.filter(id__in=ids).order_by("id"):
        try:
            moved += failure_requeue(record=record, by=by, model=model)
        except ApplicationError as exc:
            logger.warning("failure %s not requeued: %s", record.id, exc.message)
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
    failure_handled_hook(failure=current)
    logger.info("failure %s %s by %s", record.id, state, by)
    record.refresh_from_db()
    return True
