"""queued|retrying|running -> cancelled.

Part of the job services (jobs/services/__init__.py has the transition table)."""

import logging
import uuid

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from api.errors import Conflict
from jobs.cancellation import cancel_signal_on_commit
from jobs.models import LlmJob
from jobs.services.attempts import _ENDED_WITH_OUTPUT
from jobs.services.outcomes import CancelledResult
from jobs.transitions import Transition, transition_committed
from ledger.models import CostEntry
from ledger.services import AttemptRecord, cost_entry_record_attempt

logger = logging.getLogger(__name__)


CANCELLABLE_AT_ONCE = Q(status__in=LlmJob.WAITING_STATUSES) | Q(
    status=LlmJob.Status.RUNNING, mode=LlmJob.Mode.DEFERRED, provider_batch__isnull=False
)
"""The jobs ``job_cancel`` cancels at once: waiting ones, and one waiting in a provider batch,
which has no stream to close (its batch result, if it comes, is booked superseded,
deferred/services.py)."""


# --- Staff and API actions ----------------------------------------------------------------------


@transaction.atomic
def job_cancel(*, job: LlmJob, running: bool = False) -> LlmJob:
    """Cancel a job. A queued or retrying one is cancelled here: a worker that picks its RQ job
    up later finds it cancelled and never calls the provider (needs no Redis). With
    ``running``, a running one is marked (``cancel_requested_at``) and its worker told
    (jobs/cancellation.py): the worker closes the stream, books the attempt with what streamed,
    and ends the job cancelled (``job_cancel_running``); it is returned still running. Conflict
    for a final job (and, without ``running``, a running one: batches and pipelines let a job
    that started run to its end)."""
    now = timezone.now()
    updated = LlmJob.objects.filter(CANCELLABLE_AT_ONCE, id=job.id).update(
        status=LlmJob.Status.CANCELLED, completed_at=now, next_attempt_at=None
    )
    if (
        not updated
        and running
        and LlmJob.objects.filter(
            id=job.id, status=LlmJob.Status.RUNNING, cancel_requested_at__isnull=True
        ).update(cancel_requested_at=now)
    ):
        cancel_signal_on_commit(job.id)
    job.refresh_from_db()
    if running and job.status == LlmJob.Status.RUNNING:
        return job
    if not updated:
        raise Conflict(
            f"A {job.status} job cannot be cancelled.",
            code="not_cancellable",
            detail={"status": job.status},
        )
    transition_committed(job, Transition.CANCELLED)
    return job


@transaction.atomic
def job_cancel_running(
    *, job_id: uuid.UUID, attempt: int, result: CancelledResult
) -> LlmJob | None:
    """running -> cancelled: the worker closed the stream of a job whose cancel was asked for.
    The attempt is booked with what streamed (its input as reported, its output bounded by what
    arrived), and the job keeps its partial output. None when the job moved on meanwhile (a
    takeover): the ledger is then only corrected, as for a late failure."""
    job = LlmJob.objects.select_for_update().get(id=job_id)
    record = AttemptRecord(
        outcome=CostEntry.Outcome.CANCELLED,
        usage=result.usage,
        http_status=result.http_status,
        reason_code="cancelled",
        message=result.message,
        request_id=result.request_id,
        latency_ms=result.latency_ms,
        maybe_billed=result.maybe_billed,
        output_tokens_bound=result.output_tokens_bound,
    )
    if job.status != LlmJob.Status.RUNNING or job.attempts != attempt:
        logger.warning(
            "job %s attempt %s was cancelled after a takeover (job now %s, attempt %s)",
            job.id,
            attempt,
            job.status,
            job.attempts,
        )
        return None
    entry = cost_entry_record_attempt(job=job, attempt=attempt, record=record)
    booked = entry.input_tokens, entry.output_tokens
    job.status = LlmJob.Status.CANCELLED
    job.completed_at = timezone.now()
    job.next_attempt_at = None
    job.output_text = result.text
    job.output_content = result.content
    job.stop_reason = "cancelled"
    if result.usage:
        job.input_tokens, job.output_tokens = booked
        job.cache_creation_input_tokens = entry.cache_creation_input_tokens
        job.cache_read_input_tokens = entry.cache_read_tokens
    job.cost_usd = job.cost_usd + entry.cost_usd
    job.save(update_fields=_ENDED_WITH_OUTPUT)
    transition_committed(job, Transition.CANCELLED)
    return job
