"""The deferred loop's poll: each open provider batch is read, and an ended one's results are
booked to their jobs, each exactly once (``ProviderBatchItem.booked_at``)."""

import logging
import uuid

from django.db import transaction
from django.utils import timezone

from deferred.models import ProviderBatch, ProviderBatchItem
from deferred.report import OPEN_STATUSES, DeferredReport
from jobs.models import LlmJob
from jobs.retry_policy import classify
from jobs.services import (
    AttemptFailure,
    SuccessResult,
    job_attempt_failed,
    job_batch_superseded,
    job_complete,
    job_run_in_real_time,
)
from ledger.models import CostEntry
from ledger.services import AttemptRecord
from providers.message_batches import (
    BatchApiError,
    BatchItemResult,
    batch_results,
    batch_retrieve,
)

__all__ = ["book_one", "deferred_poll"]

logger = logging.getLogger(__name__)


def deferred_poll(*, report: DeferredReport | None = None) -> DeferredReport:
    """Read every open provider batch; book the results of those that ended."""
    report = report or DeferredReport()
    for batch in ProviderBatch.objects.filter(status__in=OPEN_STATUSES).order_by("created_at"):
        try:
            if batch.status != ProviderBatch.Status.ENDED:
                info = batch_retrieve(
                    provider_name=batch.provider, batch_id=batch.provider_batch_id
                )
                ended = info.processing_status == "ended"
                ProviderBatch.objects.filter(id=batch.id).update(
                    request_counts=info.request_counts,
                    last_polled_at=timezone.now(),
                    **(
                        {"status": ProviderBatch.Status.ENDED, "ended_at": info.ended_at}
                        if ended
                        else {}
                    ),
                )
                if not ended:
                    continue
                report.batches_ended += 1
            _book_results(batch, report)
        except BatchApiError as error:
            # The next pass tries again: the batch and its results wait at the provider (29 days).
            logger.warning("provider batch %s: %s", batch.provider_batch_id, error)
    return report


def _book_results(batch: ProviderBatch, report: DeferredReport) -> None:
    for result in batch_results(provider_name=batch.provider, batch_id=batch.provider_batch_id):
        outcome = book_one(batch, result)
        if outcome is not None:
            report.results_booked += 1
            report.superseded += outcome
    # An item the results left out (never seen so far) is treated as expired.
    for item in ProviderBatchItem.objects.filter(batch=batch, booked_at__isnull=True):
        missing = BatchItemResult(custom_id=str(item.job_id), type="expired")
        outcome = book_one(batch, missing)
        if outcome is not None:
            report.results_booked += 1
            report.superseded += outcome
    ProviderBatch.objects.filter(id=batch.id).update(
        status=ProviderBatch.Status.BOOKED, booked_at=timezone.now()
    )


@transaction.atomic
def book_one(batch: ProviderBatch, result: BatchItemResult) -> int | None:
    """Book one result once. Returns 1 when it was superseded, 0 when it went to its job, None
    when it had been booked already (a pass cut off half way reads the results again)."""
    try:
        job_id = uuid.UUID(result.custom_id)
    except ValueError:
        logger.warning("provider batch %s: a result of no job of ours", batch.provider_batch_id)
        return None
    item = (
        ProviderBatchItem.objects.select_for_update()
        .filter(batch=batch, job_id=job_id, booked_at__isnull=True)
        .first()
    )
    if item is None:
        return None
    in_flight = LlmJob.objects.filter(
        id=item.job_id,
        status=LlmJob.Status.RUNNING,
        attempts=item.attempt,
        provider_batch_id=batch.id,
    ).exists()
    record = _record_of(result)
    if not in_flight:
        job_batch_superseded(
            job_id=item.job_id,
            attempt=item.attempt,
            record=record,
            moved_to_real_time=item.moved_to_real_time,
        )
    elif result.type == "succeeded":
        job_complete(
            job_id=item.job_id,
            attempt=item.attempt,
            result=SuccessResult(
                text=result.text,
                content=result.content,
                stop_reason=result.stop_reason,
                usage=dict(result.usage or {}),
                http_status=200,
                request_id=batch.provider_batch_id,
                latency_ms=0,
                batch=True,
            ),
        )
    elif result.type == "errored":
        failure = AttemptFailure(
            classification=classify(
                kind="error_response",
                http_status=result.http_status,
                error_type=result.error_type,
                message=result.error_message,
            ),
            record=record,
        )
        job_attempt_failed(job_id=item.job_id, attempt=item.attempt, failure=failure)
    else:  # expired (the batch ran past 24 hours) or cancelled at the provider
        job_run_in_real_time(
            job_id=item.job_id, attempt=item.attempt, record=record, reason=result.type
        )
    item.booked_at = timezone.now()
    item.result_type = result.type
    item.superseded = not in_flight
    item.save(update_fields=["booked_at", "result_type", "superseded"])
    return int(not in_flight)


_OUTCOMES = {
    "succeeded": CostEntry.Outcome.SUCCESS,
    "errored": CostEntry.Outcome.ERROR_RESPONSE,
    "expired": CostEntry.Outcome.EXPIRED,
    "canceled": CostEntry.Outcome.CANCELLED,
}


def _record_of(result: BatchItemResult) -> AttemptRecord:
    return AttemptRecord(
        outcome=_OUTCOMES.get(result.type, CostEntry.Outcome.EXPIRED),
        usage=dict(result.usage or {}) if result.type == "succeeded" else {},
        http_status=result.http_status if result.type == "errored" else None,
        error_type=result.error_type,
        message=(result.error_message or ("" if result.type == "succeeded" else result.type))[
            :2000
        ],
        latency_ms=0 if result.type == "succeeded" else None,
        batch=True,
    )
