"""running (lost) -> retrying | failed: a worker that died mid-call (the reconciler), and a
waiting job whose RQ job Redis lost.

Part of the job services (jobs/services/__init__.py has the transition table)."""

import logging
import uuid
from datetime import datetime

from django.db import transaction

from jobs.models import LlmJob
from jobs.services.attempts import _end_failed_attempt
from jobs.services.deferred import _in_provider_batch
from jobs.services.outcomes import AttemptFailure
from jobs.services.submit import job_enqueue
from jobs.transitions import Transition
from ledger.models import CostEntry
from ledger.services import AttemptRecord

logger = logging.getLogger(__name__)


@transaction.atomic
def job_recover(
    *, job_id: uuid.UUID, stale_before: datetime, in_batch: int | None = None
) -> LlmJob | None:
    """The reconciler's transition for a running job whose worker is gone (killed, crashed or
    cut off): the attempt is booked at its upper bound and retried as ``worker_lost``.

    A job running in a provider batch has no worker: only the deferred loop recovers it, for a
    batch it claimed and never confirmed sent (``in_batch``)."""
    from jobs.retry_policy import classify

    job = LlmJob.objects.select_for_update().get(id=job_id)
    if job.status != LlmJob.Status.RUNNING or (
        job.heartbeat_at is not None and job.heartbeat_at >= stale_before
    ):
        return None
    if _in_provider_batch(job) and job.provider_batch_id != in_batch:
        return None
    failure = AttemptFailure(
        classification=classify(kind="worker_lost"),
        record=AttemptRecord(
            # The worker may have been mid-call: the provider may have billed it.
            outcome=CostEntry.Outcome.UNKNOWN,
            message="The worker stopped (killed, crashed or cut off) during the attempt.",
            maybe_billed=True,
        ),
    )
    return _end_failed_attempt(job, failure, via=Transition.RECOVERED)


@transaction.atomic
def job_enqueue_again(*, job_id: uuid.UUID, lost_rq_job_id: str) -> bool:
    """Enqueue a waiting job whose RQ job Redis lost (or whose retry is overdue). Returns False
    when the job moved on meanwhile (claimed, cancelled, or enqueued again by someone else)."""
    job = LlmJob.objects.select_for_update().filter(id=job_id).first()
    if job is None or job.status not in LlmJob.WAITING_STATUSES or job.rq_job_id != lost_rq_job_id:
        return False
    job_enqueue(job=job)
    return True
