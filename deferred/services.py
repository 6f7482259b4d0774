"""Deferred work at the batch price: the deferred loop's passes (``deferred_pass``).

Waiting jobs of ``mode`` ``deferred`` are never pushed on the llm queue (``job_enqueue`` skips
them); each pass of ``manage.py deferred_batches --loop``:

1. **polls** every open provider batch; once one has ended, books each result to its job
   (``custom_id`` is the job id): a success completes it at the batch price, an errored item
   goes through the retry table (a transient error returns to a later provider batch), an
   expired or cancelled one runs in real time; a result whose job has moved on (to real time
   near its deadline, or cancelled) is still booked, superseded, since it was paid;
2. **moves to real time** every job of an open batch whose deadline comes closer than its
   expected real-time duration plus ``LLM_DEFERRED_FALLBACK_MARGIN_SECONDS``, and cancels a
   batch once none of its jobs waits for it;
3. **flushes**: per model, the waiting deferred jobs become a provider batch when the oldest has
   waited ``LLM_DEFERRED_FLUSH_SECONDS`` or ``LLM_DEFERRED_MAX_BATCH`` are waiting. Each job's
   attempt is reserved against its budgets at the batch price and claimed (``running``, its
   ``provider_batch`` set) before the batch is sent, so every attempt sent has its ledger row
   to come, and a loop killed between the claim and the send is recovered (``recover_unsent``).

The flush is deferred/flush.py, the poll and the booking deferred/booking.py; the jobs'
transitions are the services of jobs/services/: these modules only decide which.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from deferred.booking import deferred_poll
from deferred.flush import deferred_flush, recover_unsent, too_near_for_a_batch
from deferred.models import ProviderBatch, ProviderBatchItem
from deferred.report import OPEN_STATUSES, DeferredReport
from jobs.models import LlmJob
from jobs.services import job_run_in_real_time
from jobs.timeouts import job_timeout_for
from providers.message_batches import BatchApiError, batch_cancel

__all__ = ["DeferredReport", "deferred_flush", "deferred_pass", "deferred_poll"]

logger = logging.getLogger(__name__)


def deferred_pass(*, now: datetime | None = None) -> DeferredReport:
    """One pass of the deferred loop: poll, move near-deadline jobs, flush."""
    report = DeferredReport()
    recover_unsent(report)
    deferred_poll(report=report)
    _deadline_fallback(report, now=now)
    _cancel_batches_nobody_waits_for(report)
    deferred_flush(report=report, now=now)
    return report


# --- Deadlines and cancels ----------------------------------------------------------------------


def _deadline_fallback(report: DeferredReport, *, now: datetime | None) -> None:
    """A job of an open batch whose deadline is nearer than a real-time run plus the margin runs
    in real time now; its batch result, if it comes, is booked superseded."""
    now = now or timezone.now()
    margin = settings.LLM_DEFERRED_FALLBACK_MARGIN_SECONDS
    # The longest a real-time run of the largest job can take bounds the lookahead.
    horizon = now + timedelta(seconds=margin + job_timeout_for(200_000))
    candidates = LlmJob.objects.filter(
        status=LlmJob.Status.RUNNING,
        provider_batch__isnull=False,
        provider_batch__status__in=OPEN_STATUSES,
        deadline__isnull=False,
        deadline__lte=horizon,
    ).only("id", "attempts", "deadline", "max_tokens", "provider_batch_id")
    for job in candidates:
        if too_near_for_a_batch(job, now):
            with transaction.atomic():
                moved = job_run_in_real_time(
                    job_id=job.id, attempt=job.attempts, record=None, reason="deadline"
                )
                if moved is not None:
                    ProviderBatchItem.objects.filter(job_id=job.id, attempt=job.attempts).update(
                        moved_to_real_time=True
                    )
            report.to_real_time += int(moved is not None)


def _cancel_batches_nobody_waits_for(report: DeferredReport) -> None:
    """Cancel an open batch none of whose jobs waits for it any more (each moved to real time or
    was cancelled): what it would still do is not needed. Its results are booked all the same."""
    waiting = LlmJob.objects.filter(status=LlmJob.Status.RUNNING, provider_batch_id__isnull=False)
    busy = set(waiting.values_list("provider_batch_id", flat=True).distinct())
    for batch in ProviderBatch.objects.filter(
        status=ProviderBatch.Status.IN_PROGRESS, cancel_requested_at__isnull=True
    ).exclude(id__in=busy):
        try:
            batch_cancel(provider_name=batch.provider, batch_id=batch.provider_batch_id)
        except BatchApiError as error:
            logger.warning("provider batch %s: cancel failed (%s)", batch.provider_batch_id, error)
            continue
        ProviderBatch.objects.filter(id=batch.id).update(
            status=ProviderBatch.Status.CANCELING, cancel_requested_at=timezone.now()
        )
        report.batches_cancelled += 1
        logger.info("provider batch %s cancelled: no job waits for it", batch.provider_batch_id)
