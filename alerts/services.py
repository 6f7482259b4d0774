"""Writes on the dead-letter queue."""

import logging

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from alerts.models import FailureRecord
from jobs.models import LlmJob
from jobs.services import job_requeue

__all__ = ["failure_record_create", "failure_requeue", "failure_resolve"]

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
    return FailureRecord.objects.create(
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


@transaction.atomic
def failure_requeue(
    *, record: FailureRecord, by: User | None = None, model: str | None = None
) -> bool:
    """Requeue the record's job with a fresh retry budget. A record requeued twice runs once."""
    record = FailureRecord.objects.select_for_update().get(id=record.id)
    if record.state != FailureRecord.State.OPEN:
        return False
    moved = job_requeue(job=record.job, model=model)
    if moved:
        record.state = FailureRecord.State.REQUEUED
        record.handled_at = timezone.now()
        record.handled_by = by
        record.save(update_fields=["state", "handled_at", "handled_by"])
    return moved


@transaction.atomic
def failure_resolve(
    *,
    record: FailureRecord,
    by: User | None = None,
    comment: str = "",
    state: str = FailureRecord.State.RESOLVED,
) -> bool:
    """Close an open record as resolved or ignored, recording who did it and why."""
    if state not in (FailureRecord.State.RESOLVED, FailureRecord.State.IGNORED):
        raise ValueError(f"cannot close a failure as {state!r}")
    updated = FailureRecord.objects.filter(id=record.id, state=FailureRecord.State.OPEN).update(
        state=state, handled_at=timezone.now(), handled_by=by, comment=comment
    )
    record.refresh_from_db()
    return bool(updated)
