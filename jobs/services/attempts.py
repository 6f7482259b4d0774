"""queued|retrying -> running (the claim, its attempt fixed in ``JobAttempt``), and the end of
an attempt: completed, or retrying | failed as the retry service decides.

Part of the job services (jobs/services/__init__.py has the transition table)."""

import logging
import uuid
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from embeddings.storage import vectors_store
from jobs import breaker
from jobs.deadlines import deadline_stop, retry_passes_deadline
from jobs.fallbacks import moves_after_failure
from jobs.models import JobAttempt, LlmJob
from jobs.retry_policy import decide
from jobs.selectors import jobs_runnable
from jobs.services.holds import _dead_letter, _move_to, _schedule_retry
from jobs.services.outcomes import AttemptFailure, SuccessResult
from jobs.transitions import Transition, transition_committed
from ledger.budgets import Reservation, budget_claim
from ledger.models import CostEntry
from ledger.selectors import price_for_model
from ledger.services import AttemptRecord, cost_entry_correct_late_result, cost_entry_record_attempt
from providers.models import DEFAULT_PROVIDER
from providers.selectors import provider_name_for_model

logger = logging.getLogger(__name__)


# --- Claim --------------------------------------------------------------------------------------


def job_claim(
    *,
    job_id: str,
    rq_job_id: str | None = None,
    seen: LlmJob | None = None,
    reservation: Reservation | None = None,
) -> LlmJob | None:
    """Move a waiting job to running and count the attempt; None if this copy may not run it.

    Only the RQ job the row points at may claim it (a stray copy requeued by hand from rq's
    failed registry, or duplicated by a Redis failover, starts no second retry chain), and a
    retrying job only once its ``next_attempt_at`` is due. Final, cancelled and running jobs are
    left alone. One conditional UPDATE: exactly one winner.

    ``seen``: the row as the caller read it just before (the runner's ``job_for_run``). The
    claim then also requires the row's ``attempts`` and ``rq_job_id`` to be as seen, and returns
    ``seen`` with the claim's changes made to it instead of reading the row again.

    ``reservation``: this copy's budget reservation (``budget_reserve``), claimed in the same
    transaction; the claim fails if it was released meanwhile, so no call goes out unheld.
    """
    now = timezone.now()
    # Nor a job whose deadline passed since the runner looked (a wait for the rate limiter).
    runnable = jobs_runnable(job_id=job_id, rq_job_id=rq_job_id).filter(
        Q(deadline__isnull=True) | Q(deadline__gt=now)
    )
    if seen is not None:
        runnable = runnable.filter(attempts=seen.attempts, rq_job_id=seen.rq_job_id)
    with transaction.atomic():
        if not runnable.update(
            status=LlmJob.Status.RUNNING,
            attempts=F("attempts") + 1,
            budget_attempts=F("budget_attempts") + 1,
            started_at=Coalesce(F("started_at"), now),
            heartbeat_at=now,
            next_attempt_at=None,
            limiter_wait_since=None,
        ):
            return None
        if reservation is not None and not budget_claim(reservation=reservation):
            transaction.set_rollback(True)
            return None
        if seen is None:
            job = LlmJob.objects.get(id=job_id)
        else:
            job = seen
            job.status = LlmJob.Status.RUNNING
            job.attempts += 1
            job.budget_attempts += 1
            job.started_at = job.started_at or now
            job.heartbeat_at = now
            job.next_attempt_at = None
            job.limiter_wait_since = None
        _attempt_record(job, reservation=reservation)
        transition_committed(job, Transition.CLAIMED)
    return job


def _attempt_record(
    job: LlmJob, *, reservation: Reservation | None, batch: bool = False
) -> JobAttempt:
    """Fix the attempt just claimed: its model, provider, price and reservation, in the claim's
    transaction. Every booking of it reads them (ledger/services.py), whatever the job becomes."""
    price = reservation.price if reservation is not None else None
    if price is None:
        price = price_for_model(model=job.run_model)
    return JobAttempt.objects.create(
        job=job,
        attempt=job.attempts,
        model=job.run_model,
        provider=price.provider_name if price is not None else DEFAULT_PROVIDER,
        price=price,
        batch=batch,
        reservation_token=reservation.token if reservation is not None else None,
    )


# --- End of an attempt --------------------------------------------------------------------------

_ENDED_WITH_OUTPUT = [
    "status",
    "completed_at",
    "next_attempt_at",
    "output_text",
    "output_content",
    "stop_reason",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "cost_usd",
]
"""What a job that ends with an answer (whole, or cut short by a cancel) writes."""


@transaction.atomic
def job_complete(*, job_id: uuid.UUID, attempt: int, result: SuccessResult) -> LlmJob | None:
    """Book a successful attempt and complete the job.

    A late result (the reconciler took the attempt over while this worker was cut off, and
    booked it at its upper bound) is booked as a correction to the real cost; the job still
    completes with it when no newer attempt has started, and its pending retry is dropped.
    Returns the completed job, or None when the result only corrected the ledger.
    """
    job = LlmJob.objects.select_for_update().get(id=job_id)
    record = AttemptRecord(
        outcome=CostEntry.Outcome.SUCCESS,
        usage=result.usage,
        http_status=result.http_status,
        request_id=result.request_id,
        latency_ms=result.latency_ms,
        batch=result.batch,
    )
    if job.status == LlmJob.Status.RUNNING and job.attempts == attempt:
        entry = cost_entry_record_attempt(job=job, attempt=attempt, record=record)
        cost = entry.cost_usd
    else:
        correction = cost_entry_correct_late_result(job=job, attempt=attempt, record=record)
        cost = correction.cost_usd if correction else Decimal(0)
        if correction is None or job.status != LlmJob.Status.RETRYING or job.attempts != attempt:
            logger.warning(
                "job %s attempt %s returned after a takeover (job now %s, attempt %s): %s",
                job.id,
                attempt,
                job.status,
                job.attempts,
                "ledger corrected" if correction else "nothing to book",
            )
            if correction is not None:
                job.cost_usd = F("cost_usd") + cost
                job.save(update_fields=["cost_usd"])
            return None
        # The retry the takeover scheduled is dropped: its RQ job no longer matches the row.
        job.rq_job_id = ""
    usage = result.usage
    if result.embeddings is not None:
        # In this transaction: a completed embedding job always has its vectors.
        vectors_store(job_id=job.id, vectors=result.embeddings)
    job.status = LlmJob.Status.COMPLETED
    job.completed_at = timezone.now()
    job.next_attempt_at = None
    job.served_by = job.run_model
    job.output_text = result.text
    job.output_content = result.content
    job.stop_reason = result.stop_reason
    job.input_tokens = usage["input_tokens"]
    job.output_tokens = usage["output_tokens"]
    job.cache_creation_input_tokens = (
        usage["cache_write_5m_tokens"] + usage["cache_write_1h_tokens"]
    )
    job.cache_read_input_tokens = usage["cache_read_tokens"]
    job.cost_usd = job.cost_usd + cost
    job.error_code, job.error_http_status, job.error_message, job.error_severity = "", None, "", ""
    job.save(
        update_fields=[
            *_ENDED_WITH_OUTPUT,
            "served_by",
            "rq_job_id",
            "error_code",
            "error_http_status",
            "error_message",
            "error_severity",
        ]
    )
    transition_committed(job, Transition.COMPLETED)
    return job


@transaction.atomic
def job_attempt_failed(
    *, job_id: uuid.UUID, attempt: int, failure: AttemptFailure
) -> LlmJob | None:
    """Book a failed attempt and let the retry policy choose: a delayed retry or the DLQ.

    A failure that arrives after a takeover only corrects the ledger (an error response proves
    the estimated attempt was not billed). Returns the job, or None in that case.
    """
    job = LlmJob.objects.select_for_update().get(id=job_id)
    if job.status != LlmJob.Status.RUNNING or job.attempts != attempt:
        correction = cost_entry_correct_late_result(job=job, attempt=attempt, record=failure.record)
        if correction is not None:
            job.cost_usd = F("cost_usd") + correction.cost_usd
            job.save(update_fields=["cost_usd"])
        logger.warning(
            "job %s attempt %s failed after a takeover (job now %s, attempt %s)",
            job.id,
            attempt,
            job.status,
            job.attempts,
        )
        return None
    return _end_failed_attempt(job, failure, via=None)


def _end_failed_attempt(job: LlmJob, failure: AttemptFailure, *, via: Transition | None) -> LlmJob:
    """Ledger row + retry or dead-letter. Inside a transaction, the job row locked."""
    reason = failure.classification.reason_code
    retry_counts = dict(job.retry_counts or {})
    decision = decide(
        failure.classification,
        retries_used=retry_counts.get(reason, 0),
        attempts_in_budget=job.budget_attempts,
        retry_after=failure.retry_after,
    )
    account_wide = breaker.is_account_wide(reason)
    if failure.classification.transient:
        job.model_failures += 1
    if account_wide:
        # Opened first, so that the move below skips every model of this provider too.
        breaker.breaker_open(
            reason_code=reason,
            message=failure.record.message,
            job=job,
            provider=provider_name_for_model(model=job.run_model),
            answered_at=failure.answered_at,
        )
    move_to = None
    if job.cancel_requested_at is None:
        move_to = moves_after_failure(
            job,
            transient=failure.classification.transient,
            account_wide=account_wide,
            retries_exhausted=decision.retries_exhausted,
        )
    failure.record.reason_code = reason
    # The row says "retried after this delay" only when the job really goes to retrying: not
    # when a cancel waiting for this attempt ends it, nor when its deadline stops the retry
    # (the metrics count a retrying transition from the row: they must equal the ledger).
    retry_at = None
    if decision.retry and decision.delay_seconds is not None:
        retry_at = timezone.now() + timedelta(seconds=decision.delay_seconds)
    retries = (
        retry_at is not None
        and job.cancel_requested_at is None
        and not retry_passes_deadline(job.deadline, at=retry_at)
    )
    failure.record.retry_delay_seconds = (
        0.0 if move_to else (decision.delay_seconds if retries else None)
    )
    # Booked at the model this attempt ran on, before the job moves.
    entry = cost_entry_record_attempt(job=job, attempt=job.attempts, record=failure.record)
    job.cost_usd = job.cost_usd + entry.cost_usd
    job.error_code = reason
    job.error_http_status = failure.record.http_status
    job.error_message = failure.record.message[:2000]
    job.error_severity = failure.classification.severity
    fields = ["status", "cost_usd", "error_code", "error_http_status", "error_message"]
    fields += ["error_severity", "next_attempt_at", "model_failures"]
    if move_to is not None:
        logger.warning(
            "job %s falls back from %s to %s after %s",
            job.id,
            job.run_model,
            move_to,
            reason,
            extra={"job_id": str(job.id), "fallback_model": move_to},
        )
        # Its "retrying" is counted under the model this attempt ran on, as its ledger row.
        job.moved_from = job.run_model  # type: ignore[attr-defined]
        _move_to(job, move_to)
        fields += ["current_model", "retry_counts", "limiter_wait_since"]
        return _schedule_retry(job, at=timezone.now(), fields=fields, via=via)
    if decision.retry and job.cancel_requested_at is not None:
        # Cancelled while this attempt ran (its worker failed or died before it saw the
        # cancel): it ends here instead of being retried.
        job.status = LlmJob.Status.CANCELLED
        job.completed_at = timezone.now()
        job.next_attempt_at = None
        job.save(update_fields=[*fields, "completed_at"])
        transition_committed(job, Transition.CANCELLED)
        return job
    message = failure.record.message
    if decision.retry:
        assert retry_at is not None
        at = retry_at
        stopped = deadline_stop(job, at=at, fields=fields, message=message)
        if stopped is None:
            retry_counts[reason] = retry_counts.get(reason, 0) + 1
            job.retry_counts = retry_counts
            return _schedule_retry(job, at=at, fields=[*fields, "retry_counts"], via=via)
        message = stopped  # it ends with this (its last) error, and says why

    return _dead_letter(
        job,
        fields=fields,
        via=via,
        severity=failure.classification.severity,
        reason_code=reason,
        retries_exhausted=decision.retries_exhausted,
        http_status=failure.record.http_status,
        error_type=failure.record.error_type,
        message=message,
        request_id=failure.record.request_id,
    )
