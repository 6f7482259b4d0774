"""Running one job: lock, claim, call the provider, price the attempt, retry or dead-letter."""

import logging
import math
import threading
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import django_rq
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone
from redis.exceptions import LockError

from alerts.services import failure_record_create
from jobs import provider
from jobs.models import LlmJob
from jobs.retry_policy import Classification, classify, decide
from jobs.services import job_enqueue
from ledger.models import CostEntry
from ledger.pricing import attempt_cost, upper_bound_cost
from ledger.selectors import price_for_model

__all__ = ["AttemptFailure", "job_lock_key", "job_run", "record_failed_attempt"]

logger = logging.getLogger(__name__)


def job_lock_key(job_id: object) -> str:
    return f"llmops:job-lock:{job_id}"


def _lock_ttl() -> int:
    # Long enough to survive a missed heartbeat or two, short enough that a killed worker's
    # lock is gone well before the reconciler looks.
    return max(2, math.ceil(settings.LLM_HEARTBEAT_SECONDS * 4))


class _Heartbeat:
    """Keeps the job's lock alive and its heartbeat_at fresh while the provider call runs."""

    def __init__(self, job_id: UUID, lock: Any) -> None:
        self.job_id, self.lock = job_id, lock
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True, name=f"heartbeat-{job_id}")

    def __enter__(self) -> "_Heartbeat":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def _beat(self) -> None:
        try:
            while not self.stopped.wait(settings.LLM_HEARTBEAT_SECONDS):
                try:
                    self.lock.reacquire()
                except LockError:
                    logger.warning("job %s: lock lost while running", self.job_id)
                LlmJob.objects.filter(id=self.job_id, status=LlmJob.Status.RUNNING).update(
                    heartbeat_at=timezone.now()
                )
        finally:
            connection.close()


def _claim(job_id: str) -> LlmJob | None:
    """Move a waiting job to running. Anything else (final, cancelled, running) is left alone."""
    now = timezone.now()
    claimed = LlmJob.objects.filter(id=job_id, status__in=LlmJob.WAITING_STATUSES).update(
        status=LlmJob.Status.RUNNING,
        attempts=F("attempts") + 1,
        budget_attempts=F("budget_attempts") + 1,
        started_at=Coalesce(F("started_at"), now),
        heartbeat_at=now,
        next_attempt_at=None,
    )
    return LlmJob.objects.get(id=job_id) if claimed else None


def job_run(*, job_id: str) -> str:
    """Run one attempt of a job. Returns what happened, for logs: locked, skipped or the outcome."""
    redis = django_rq.get_connection("llm")
    lock = redis.lock(job_lock_key(job_id), timeout=_lock_ttl(), blocking=False)
    if not lock.acquire(blocking=False):
        logger.info("job %s is locked by another worker; this copy exits", job_id)
        return "locked"
    try:
        close_old_connections()
        job = _claim(job_id)
        if job is None:
            logger.info("job %s is not waiting; nothing to run", job_id)
            return "skipped"
        with _Heartbeat(job.id, lock):
            outcome = provider.call_messages(body=job.provider_request(), job_id=str(job.id))
        if outcome.kind == "success":
            _record_success(job, outcome)
        else:
            _record_provider_failure(job, outcome)
        return outcome.kind
    finally:
        try:
            lock.release()
        except LockError:
            pass


def _current_attempt(job: LlmJob) -> LlmJob | None:
    """Lock the row and check that this worker still owns the attempt it started."""
    current = LlmJob.objects.select_for_update().get(id=job.id)
    if current.status != LlmJob.Status.RUNNING or current.attempts != job.attempts:
        logger.error(
            "job %s attempt %s finished after the reconciler took it over; its ledger row stands",
            job.id,
            job.attempts,
        )
        return None
    return current


@transaction.atomic
def _record_success(job: LlmJob, outcome: provider.ProviderOutcome) -> None:
    current = _current_attempt(job)
    if current is None:
        return
    # The price in force when this attempt ran, not when the job first started.
    price = price_for_model(model=current.model)
    cost = attempt_cost(price, outcome.usage) if price else Decimal(0)
    CostEntry.objects.create(
        job=current,
        attempt=current.attempts,
        feature=current.feature,
        model=current.model,
        price=price,
        outcome=CostEntry.Outcome.SUCCESS,
        http_status=outcome.http_status,
        request_id=outcome.request_id,
        latency_ms=outcome.latency_ms,
        cost_usd=cost,
        **outcome.usage,
    )
    usage = outcome.usage
    current.status = LlmJob.Status.COMPLETED
    current.completed_at = timezone.now()
    current.output_text = outcome.text
    current.stop_reason = outcome.stop_reason
    current.input_tokens = usage["input_tokens"]
    current.output_tokens = usage["output_tokens"]
    current.cache_creation_input_tokens = (
        usage["cache_write_5m_tokens"] + usage["cache_write_1h_tokens"]
    )
    current.cache_read_input_tokens = usage["cache_read_tokens"]
    current.cost_usd = current.cost_usd + cost
    current.error_code, current.error_http_status = "", None
    current.error_message, current.error_severity = "", ""
    current.save()
    logger.info("job %s completed in attempt %s, cost %s", job.id, current.attempts, cost)


@dataclass
class AttemptFailure:
    """What a failed attempt left behind, whatever failed: the provider, the network or a worker."""

    kind: str
    classification: Classification
    ledger_outcome: str
    message: str
    http_status: int | None = None
    error_type: str = ""
    request_id: str = ""
    retry_after: float | None = None
    latency_ms: int | None = None


@transaction.atomic
def _record_provider_failure(job: LlmJob, outcome: provider.ProviderOutcome) -> None:
    current = _current_attempt(job)
    if current is None:
        return
    if outcome.kind == "error_response":
        ledger_outcome = CostEntry.Outcome.ERROR_RESPONSE
    elif outcome.outcome_unknown:
        ledger_outcome = CostEntry.Outcome.UNKNOWN
    else:
        ledger_outcome = CostEntry.Outcome.CONNECTION_ERROR
    failure = AttemptFailure(
        kind=outcome.kind,
        classification=classify(
            kind=outcome.kind,
            http_status=outcome.http_status,
            error_type=outcome.error_type,
            error_code=outcome.error_code,
            message=outcome.message,
        ),
        ledger_outcome=ledger_outcome,
        message=outcome.message,
        http_status=outcome.http_status,
        error_type=outcome.error_type,
        request_id=outcome.request_id,
        retry_after=outcome.retry_after,
        latency_ms=outcome.latency_ms,
    )
    record_failed_attempt(current, failure)


def record_failed_attempt(job: LlmJob, failure: AttemptFailure) -> None:
    """Write the attempt's ledger row and move the job to retrying or failed.

    Call inside a transaction with the job row locked.
    """
    is_unknown = failure.ledger_outcome == CostEntry.Outcome.UNKNOWN
    price = price_for_model(model=job.model)
    cost = Decimal(0)
    if is_unknown and price is not None:
        # The provider may have done (and billed) the work: book the most it could have cost.
        cost = upper_bound_cost(
            price, messages=job.messages, system=job.system, max_tokens=job.max_tokens
        )

    reason = failure.classification.reason_code
    retry_counts = dict(job.retry_counts or {})
    decision = decide(
        failure.classification,
        retries_used=retry_counts.get(reason, 0),
        attempts_in_budget=job.budget_attempts,
        retry_after=failure.retry_after,
    )
    CostEntry.objects.create(
        job=job,
        attempt=job.attempts,
        feature=job.feature,
        model=job.model,
        price=price,
        outcome=failure.ledger_outcome,
        http_status=failure.http_status,
        reason_code=reason,
        error_type=failure.error_type,
        error_message=failure.message[:2000],
        request_id=failure.request_id,
        latency_ms=failure.latency_ms,
        cost_usd=cost,
        is_estimated=is_unknown,
        retry_delay_seconds=decision.delay_seconds,
    )
    job.cost_usd = job.cost_usd + cost
    job.error_code = reason
    job.error_http_status = failure.http_status
    job.error_message = failure.message[:2000]
    job.error_severity = failure.classification.severity
    if decision.retry:
        assert decision.delay_seconds is not None
        retry_counts[reason] = retry_counts.get(reason, 0) + 1
        job.retry_counts = retry_counts
        job.status = LlmJob.Status.RETRYING
        job.next_attempt_at = timezone.now() + timedelta(seconds=decision.delay_seconds)
        job.save()
        job_enqueue(job=job, delay_seconds=decision.delay_seconds)
        logger.info(
            "job %s attempt %s failed (%s); retry in %.1fs",
            job.id,
            job.attempts,
            reason,
            decision.delay_seconds,
        )
        return
    job.status = LlmJob.Status.FAILED
    job.completed_at = timezone.now()
    job.next_attempt_at = None
    job.save()
    failure_record_create(
        job=job,
        severity=failure.classification.severity,
        reason_code=reason,
        retries_exhausted=decision.retries_exhausted,
        http_status=failure.http_status,
        error_type=failure.error_type,
        message=failure.message,
        request_id=failure.request_id,
    )
    logger.warning("job %s dead-lettered (%s) after %s attempts", job.id, reason, job.attempts)
