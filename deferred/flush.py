"""The deferred loop's flush: waiting deferred jobs become provider message batches (reserved at
the batch price and claimed before the create), and batches never confirmed sent are recovered."""

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Min, Q
from django.utils import timezone

from deferred.models import ProviderBatch, ProviderBatchItem
from deferred.report import DeferredReport, unsent_after_seconds
from jobs.deadlines import deadline_passed
from jobs.models import LlmJob
from jobs.pauses import paused_filter
from jobs.retry_policy import classify
from jobs.services import (
    AttemptFailure,
    job_attempt_failed,
    job_batch_claim,
    job_budget_refused,
    job_deadline_exceeded,
    job_recover,
    job_undefer,
)
from jobs.timeouts import job_timeout_for
from ledger.budgets import BudgetRefusal, budget_release, budget_reserve
from ledger.models import CostEntry
from ledger.services import AttemptRecord
from providers.message_batches import (
    BatchApiError,
    BatchRequest,
    batch_create,
    split_requests,
)
from providers.selectors import provider_name_for_model

__all__ = ["deferred_flush", "recover_unsent", "too_near_for_a_batch"]

logger = logging.getLogger(__name__)


def _waiting_deferred(now: datetime) -> "Q":
    waiting = Q(mode=LlmJob.Mode.DEFERRED) & (
        Q(status=LlmJob.Status.QUEUED) | Q(status=LlmJob.Status.RETRYING, next_attempt_at__lte=now)
    )
    # A paused feature's or provider's jobs wait: no batch is sent for them (jobs/pauses.py).
    paused = paused_filter()
    return waiting if paused is None else waiting & ~paused


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
        if too_near_for_a_batch(job, now):
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


def recover_unsent(report: DeferredReport) -> None:
    """Batches claimed but never confirmed sent (the loop died during the call): their jobs'
    attempts are booked as of unknown outcome and retried (jobs/services/ ``job_recover``)."""
    cutoff = timezone.now() - timedelta(seconds=unsent_after_seconds())
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


def too_near_for_a_batch(job: LlmJob, now: datetime) -> bool:
    """Whether the job's deadline is closer than a real-time run of it can take (its RQ timeout,
    jobs/timeouts.py) plus ``LLM_DEFERRED_FALLBACK_MARGIN_SECONDS``."""
    if job.deadline is None:
        return False
    expected = job_timeout_for(job.max_tokens) + settings.LLM_DEFERRED_FALLBACK_MARGIN_SECONDS
    return job.deadline - now <= timedelta(seconds=expected)
