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
   to come, and a loop killed between the claim and the send is recovered (``_recover_unsent``).

The jobs' transitions are the services of jobs/services.py; this module only decides which.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Min, Q
from django.utils import timezone

from deferred.models import ProviderBatch, ProviderBatchItem
from jobs.deadlines import deadline_passed
from jobs.models import LlmJob
from jobs.retry_policy import classify
from jobs.services import (
    AttemptFailure,
    SuccessResult,
    job_attempt_failed,
    job_batch_claim,
    job_batch_superseded,
    job_budget_refused,
    job_complete,
    job_deadline_exceeded,
    job_recover,
    job_run_in_real_time,
    job_undefer,
)
from jobs.timeouts import job_timeout_for
from ledger.budgets import BudgetRefusal, budget_release, budget_reserve
from ledger.models import CostEntry
from ledger.services import AttemptRecord
from providers.message_batches import (
    BatchApiError,
    BatchItemResult,
    BatchRequest,
    batch_cancel,
    batch_create,
    batch_results,
    batch_retrieve,
    split_requests,
)
from providers.selectors import provider_name_for_model

__all__ = ["DeferredReport", "deferred_pass", "deferred_flush", "deferred_poll"]

logger = logging.getLogger(__name__)

OPEN_STATUSES = (
    ProviderBatch.Status.IN_PROGRESS,
    ProviderBatch.Status.CANCELING,
    ProviderBatch.Status.ENDED,
)
UNSENT_AFTER_SECONDS = 300
"""A batch claimed but not confirmed sent this long ago: its loop died between the claim and the
provider's answer. Its jobs are recovered as attempts of unknown outcome (it may have been sent)."""


@dataclass
class DeferredReport:
    batches_sent: int = 0
    jobs_sent: int = 0
    batches_ended: int = 0
    results_booked: int = 0
    superseded: int = 0
    to_real_time: int = 0
    batches_cancelled: int = 0
    unsent_recovered: int = 0

    @property
    def changed(self) -> bool:
        return any(vars(self).values())

    def __str__(self) -> str:
        return (
            f"sent {self.jobs_sent} jobs in {self.batches_sent} provider batches, "
            f"{self.batches_ended} ended, {self.results_booked} results booked "
            f"({self.superseded} superseded), {self.to_real_time} jobs to real time, "
            f"{self.batches_cancelled} batches cancelled, {self.unsent_recovered} unsent recovered"
        )


def deferred_pass(*, now: datetime | None = None) -> DeferredReport:
    """One pass of the deferred loop: poll, move near-deadline jobs, flush."""
    report = DeferredReport()
    _recover_unsent(report)
    deferred_poll(report=report)
    _deadline_fallback(report, now=now)
    _cancel_batches_nobody_waits_for(report)
    deferred_flush(report=report, now=now)
    return report


# --- Flush ------------------------------------------------------------------------------------


def _waiting_deferred(now: datetime) -> "Q":
    return Q(mode=LlmJob.Mode.DEFERRED) & (
        Q(status=LlmJob.Status.QUEUED) | Q(status=LlmJob.Status.RETRYING, next_attempt_at__lte=now)
    )


def deferred_flush(
    *, report: DeferredReport | None = None, now: datetime | None = None, force: bool = False
) -> DeferredReport:
    """Send the waiting deferred jobs of each model whose turn has come as provider batches."""
    report = report or DeferredReport()
    now = now or timezone.now()
    flush_before = now - timedelta(seconds=settings.LLM_DEFERRED_FLUSH_SECONDS)
    groups = (
        LlmJob.objects.filter(_waiting_deferred(now))
        .values("current_model")
        .annotate(waiting=Count("id"), oldest=Min("enqueued_at"))
        .order_by("current_model")
    )
    for group in groups:
        due = force or group["waiting"] >= settings.LLM_DEFERRED_MAX_BATCH
        due = due or (group["oldest"] is not None and group["oldest"] <= flush_before)
        if due:
            _flush_model(group["current_model"], now=now, report=report)
    return report


def _flush_model(model: str, *, now: datetime, report: DeferredReport) -> None:
    jobs = list(
        LlmJob.objects.filter(_waiting_deferred(now), current_model=model)
        .defer("output_text", "output_content")
        .order_by(*_flush_order())[: settings.LLM_DEFERRED_MAX_BATCH]
    )
    provider = provider_name_for_model(model=model)
    held: list[tuple[LlmJob, object]] = []
    for job in jobs:
        if deadline_passed(job.deadline):
            job_deadline_exceeded(job_id=job.id, rq_job_id=None)  # never sent past it
            continue
        if _too_near(job, now):
            # A batch may take longer than the deadline leaves: real time now instead.
            if job_undefer(job_id=job.id, reason="its deadline is too near for a batch"):
                report.to_real_time += 1
            continue
        reservation = budget_reserve(job=job, attempt=job.attempts + 1, batch=True)
        if isinstance(reservation, BudgetRefusal):
            if reservation.action != "wait":
                job_budget_refused(job_id=job.id, rq_job_id=None, refusal=reservation)
            continue  # "wait": the next flush tries again
        held.append((job, reservation))
    if not held:
        return
    requests = [
        BatchRequest(custom_id=str(job.id), params=job.provider_request()) for job, _ in held
    ]
    by_id = {str(job.id): (job, reservation) for job, reservation in held}
    for chunk in split_requests(requests):
        _send(provider, model, [by_id[r.custom_id] for r in chunk], chunk, report)


def _flush_order() -> list[Any]:
    # Earlier deadlines first (none last), then the longest waiting.
    return [F("deadline").asc(nulls_last=True), "enqueued_at"]


def _send(
    provider: str,
    model: str,
    held: list[tuple[LlmJob, object]],
    requests: list[BatchRequest],
    report: DeferredReport,
) -> None:
    with transaction.atomic():
        batch = ProviderBatch.objects.create(
            provider=provider,
            model=model,
            provider_batch_id=f"unsent-{uuid.uuid4().hex}",
            status=ProviderBatch.Status.UNSENT,
        )
        claimed = job_batch_claim(
            jobs=[(job, reservation) for job, reservation in held],  # type: ignore[misc]
            batch_id=batch.id,
        )
        ProviderBatchItem.objects.bulk_create(
            [ProviderBatchItem(batch=batch, job=job, attempt=job.attempts) for job in claimed]
        )
        batch.items_total = len(claimed)
        batch.save(update_fields=["items_total"])
    claimed_ids = {str(job.id) for job in claimed}
    for job, reservation in held:
        if str(job.id) not in claimed_ids:
            budget_release(reservation=reservation)  # type: ignore[arg-type]
    if not claimed:
        ProviderBatch.objects.filter(id=batch.id).update(
            status=ProviderBatch.Status.BOOKED, booked_at=timezone.now()
        )
        return
    sent = [r for r in requests if r.custom_id in claimed_ids]
    try:
        info = batch_create(provider_name=provider, requests=sent)
    except BatchApiError as error:
        if error.outcome_unknown:
            # It may have been created (a timeout, a dropped answer): never sent twice. The
            # batch stays unsent, and ``_recover_unsent`` books its attempts as of unknown
            # outcome once it is old enough.
            logger.warning(
                "provider batch of %s %s jobs: create of unknown outcome (%s)",
                len(sent),
                model,
                error,
            )
            return
        logger.warning(
            "provider batch of %s %s jobs not created (%s): their attempts fail",
            len(sent),
            model,
            error,
        )
        _fail_unsent(batch, claimed, error)
        return
    ProviderBatch.objects.filter(id=batch.id).update(
        provider_batch_id=info.id,
        status=ProviderBatch.Status.IN_PROGRESS,
        expires_at=info.expires_at,
        request_counts=info.request_counts,
    )
    report.batches_sent += 1
    report.jobs_sent += len(claimed)
    logger.info(
        "provider batch %s: %s jobs of %s sent to %s", info.id, len(claimed), model, provider
    )


def _fail_unsent(batch: ProviderBatch, jobs: list[LlmJob], error: BatchApiError) -> None:
    """The provider refused the batch (or never got it): each attempt ends as that error, and
    the retry table decides (a transient error returns to the next flush)."""
    kind = "error_response" if error.http_status else "connection_error"
    for job in jobs:
        failure = AttemptFailure(
            classification=classify(
                kind=kind,
                http_status=error.http_status,
                error_type=error.error_type,
                message=error.message,
            ),
            record=AttemptRecord(
                outcome=(
                    CostEntry.Outcome.ERROR_RESPONSE
                    if error.http_status
                    else CostEntry.Outcome.CONNECTION_ERROR
                ),
                http_status=error.http_status,
                error_type=error.error_type,
                message=f"Message batch not created: {error.message}"[:2000],
                batch=True,
            ),
        )
        job_attempt_failed(job_id=job.id, attempt=job.attempts, failure=failure)
    ProviderBatchItem.objects.filter(batch=batch).update(
        booked_at=timezone.now(), result_type="unsent"
    )
    ProviderBatch.objects.filter(id=batch.id).update(
        status=ProviderBatch.Status.BOOKED, booked_at=timezone.now()
    )


def _recover_unsent(report: DeferredReport) -> None:
    """Batches claimed but never confirmed sent (the loop died during the call): their jobs'
    attempts are booked as of unknown outcome and retried (jobs/services.py ``job_recover``)."""
    cutoff = timezone.now() - timedelta(seconds=UNSENT_AFTER_SECONDS)
    for batch in ProviderBatch.objects.filter(
        status=ProviderBatch.Status.UNSENT, created_at__lt=cutoff
    ):
        now = timezone.now()
        for item in ProviderBatchItem.objects.filter(batch=batch, booked_at__isnull=True):
            if job_recover(job_id=item.job_id, stale_before=now, in_batch=batch.id) is not None:
                report.unsent_recovered += 1
        ProviderBatchItem.objects.filter(batch=batch, booked_at__isnull=True).update(
            booked_at=now, result_type="unsent"
        )
        ProviderBatch.objects.filter(id=batch.id).update(
            status=ProviderBatch.Status.BOOKED, booked_at=now
        )


# --- Poll and book ------------------------------------------------------------------------------


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
        outcome = _book_one(batch, result)
        if outcome is not None:
            report.results_booked += 1
            report.superseded += outcome
    # An item the results left out (never seen so far) is treated as expired.
    for item in ProviderBatchItem.objects.filter(batch=batch, booked_at__isnull=True):
        missing = BatchItemResult(custom_id=str(item.job_id), type="expired")
        outcome = _book_one(batch, missing)
        if outcome is not None:
            report.results_booked += 1
            report.superseded += outcome
    ProviderBatch.objects.filter(id=batch.id).update(
        status=ProviderBatch.Status.BOOKED, booked_at=timezone.now()
    )


@transaction.atomic
def _book_one(batch: ProviderBatch, result: BatchItemResult) -> int | None:
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
        if _too_near(job, now):
            with transaction.atomic():
                moved = job_run_in_real_time(
                    job_id=job.id, attempt=job.attempts, record=None, reason="deadline"
                )
                if moved is not None:
                    ProviderBatchItem.objects.filter(job_id=job.id, attempt=job.attempts).update(
                        moved_to_real_time=True
                    )
            report.to_real_time += int(moved is not None)


def _too_near(job: LlmJob, now: datetime) -> bool:
    """Whether the job's deadline is closer than a real-time run of it can take (its RQ timeout,
    jobs/timeouts.py) plus ``LLM_DEFERRED_FALLBACK_MARGIN_SECONDS``."""
    if job.deadline is None:
        return False
    expected = job_timeout_for(job.max_tokens) + settings.LLM_DEFERRED_FALLBACK_MARGIN_SECONDS
    return job.deadline - now <= timedelta(seconds=expected)


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
