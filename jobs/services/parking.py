"""Parking: a waiting job whose feature or provider is paused waits with no RQ job, and goes
back on the queue, in submit order, when it is resumed (jobs/pauses.py says which are paused).

Part of the job services (jobs/services/__init__.py has the transition table)."""

import logging
import uuid

from django.db import transaction

from jobs.models import LlmJob
from jobs.services.submit import job_enqueue

__all__ = ["job_park", "jobs_unpark"]

logger = logging.getLogger(__name__)

UNPARK_BATCH = 500


@transaction.atomic
def job_park(*, job_id: uuid.UUID | str, rq_job_id: str | None, reason: str) -> LlmJob | None:
    """queued|retrying -> (parked): the job keeps its status, gets ``held_reason`` and no RQ job
    (``rq_job_id`` empty: no copy matches it, nothing polls for it, the reconciler leaves it). No
    attempt is used, nothing is sent, no budget reserved. None when it moved on meanwhile."""
    job = LlmJob.objects.select_for_update().get(id=job_id)
    if job.status not in LlmJob.WAITING_STATUSES or (
        rq_job_id is not None and job.rq_job_id != rq_job_id
    ):
        return None
    job.held_reason = reason
    job.rq_job_id = ""
    job.save(update_fields=["held_reason", "rq_job_id"])
    logger.info("job %s parked: %s", job.id, reason, extra={"job_id": str(job.id)})
    return job


def jobs_unpark(*, reason: str, features: set[str] | None = None, models: set[str] | None = None
                ) -> int:  # fmt: skip
    """Put the jobs parked for ``reason`` (of ``features``, or on ``models``) back on the queue,
    oldest first, each under a fresh RQ job; returns how many. A job whose feature or provider is
    still paused for another reason is parked again by the worker that picks it up."""
    parked = LlmJob.objects.filter(held_reason=reason, status__in=LlmJob.WAITING_STATUSES)
    if features is not None:
        parked = parked.filter(feature__in=features)
    if models is not None:
        parked = parked.filter(current_model__in=models)
    moved = 0
    while True:
        ids = list(parked.order_by("created_at", "id").values_list("id", flat=True)[:UNPARK_BATCH])
        if not ids:
            return moved
        with transaction.atomic():
            jobs = list(
                LlmJob.objects.select_for_update()
                .filter(id__in=ids, held_reason=reason, status__in=LlmJob.WAITING_STATUSES)
                .order_by("created_at", "id")
            )
            # One statement clears the batch's reason; each job then gets a fresh RQ job id,
            # pushed after the commit, in this order.
            LlmJob.objects.filter(id__in=[job.id for job in jobs]).update(held_reason="")
            for job in jobs:
                job.held_reason = ""
                job_enqueue(job=job)
            # A job that moved on meanwhile (cancelled) matches neither the lock nor the next page.
            moved += len(jobs)
