"""Running one attempt: the per-job lock, the heartbeat and the provider call. Nothing else.

Every state change is a transition in ``jobs/services/``; this module only decides which one
the call's outcome asks for.
"""

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone
from redis.exceptions import LockError, RedisError
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential

from jobs.breaker import breaker_close, breaker_gate
from jobs.cancellation import cancel_watched
from jobs.concurrency_keys import slot_acquire, slot_release
from jobs.deadlines import deadline_passed
from jobs.fallbacks import fallback_model, moves_after_wait
from jobs.heartbeat import Heartbeat
from jobs.leases import lock_ttl
from jobs.live_output import LiveOutput, live_keys_clear
from jobs.models import LlmJob
from jobs.pauses import pause_reason
from jobs.retry_policy import classify
from jobs.selectors import job_for_run
from jobs.services import (
    AttemptFailure,
    CancelledResult,
    SuccessResult,
    job_attempt_failed,
    job_budget_refused,
    job_cancel_running,
    job_claim,
    job_complete,
    job_deadline_exceeded,
    job_fall_back,
    job_hold,
    job_park,
)
from jobs.timeouts import job_timeout_for
from ledger.budgets import BudgetRefusal, budget_release, budget_reserve
from ledger.config_cache import config_pinned, config_recheck
from ledger.models import CostEntry
from ledger.services import AttemptRecord
from llmops.logs import bind_log_context, log_context
from llmops.queues import LLM_QUEUE, job_lock_key
from providers.base import ProviderOutcome, ProviderRequest
from providers.call_deadline import CallDeadline
from providers.ratelimit_headers import MAX_PAUSE_SECONDS
from providers.registry import provider_for, warm_up_providers
from providers.selectors import provider_name_for_model
from ratelimits.services import (
    RateLimitGrant,
    rate_limit_acquire,
    rate_limit_release,
    rate_limit_sent,
    rate_limit_settle,
)
from runtime.db_connections import release_connection
from runtime.redis_clients import queue_connection
from tracing.context import attempt_span_id, trace_id_of

__all__ = ["failure_from_outcome", "job_run"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

LOCK_HANDOVER_SECONDS = 10.0
"""How long the RQ job a job's row points at waits for the copy before it to let go of the job's
lock: that copy handed the job on and only has its own bookkeeping left. A live attempt's lock
(a duplicate's) is renewed by its heartbeat and outlasts the wait."""


def _send_wait_bound() -> float:
    # The longest ``rate_limit_sent`` waits: the paced slot (at most the in-process wait or
    # the pace's horizon) and then at most one 429 pause.
    ahead = max(
        settings.LLM_RATE_LIMIT_MAX_WAIT_SECONDS, settings.LLM_RATE_LIMIT_PACE_AHEAD_SECONDS
    )
    return ahead + MAX_PAUSE_SECONDS + 1.0


def job_run(*, job_id: str, rq_job_id: str | None = None) -> str:
    """Run one attempt of a job. Returns what happened, for the RQ job's result and the logs:
    ``locked``, ``skipped``, ``held`` (breaker open) or the attempt's outcome.

    Every line logged meanwhile carries the job's id, and once known its feature, model,
    attempt and the provider's request id (llmops/logs.py); they are unbound on return."""
    # Prices, budgets and pauses checked once before the call and once after it
    # (ledger/config_cache.py), not at each of their uses.
    with log_context(job_id=job_id), config_pinned():
        return _job_run(job_id=job_id, rq_job_id=rq_job_id)


def _job_run(*, job_id: str, rq_job_id: str | None) -> str:
    # The providers' SDKs loaded before the job's lock is taken: a worker that did not warm up
    # (a plain SimpleWorker) pays for it once, with no lock, claim or call deadline running.
    warm_up_providers()
    started = time.monotonic()
    redis = queue_connection(LLM_QUEUE)
    lock = redis.lock(job_lock_key(job_id), timeout=lock_ttl(), blocking=False, thread_local=False)
    if not _lock_acquire(lock, job_id=job_id, rq_job_id=rq_job_id):
        logger.info("job %s is locked by another worker; this copy exits", job_id)
        return "locked"
    try:
        close_old_connections()
        waiting = job_for_run(job_id=job_id, rq_job_id=rq_job_id)
        if waiting is None:
            logger.info("job %s is not due for this RQ job (%s); nothing to run", job_id, rq_job_id)
            return "skipped"
        if waiting.mode == LlmJob.Mode.DEFERRED:
            logger.info(
                "job %s is deferred: the deferred loop sends it in a provider batch", job_id
            )
            return "deferred"
        # Before the breaker, the limiter, the budget and the claim: a job past its deadline is
        # never called (jobs/deadlines.py).
        if deadline_passed(waiting.deadline):
            ended = job_deadline_exceeded(job_id=waiting.id, rq_job_id=rq_job_id)
            logger.info("job %s: not started by its deadline, ended failed", job_id)
            return "deadline_exceeded" if ended is not None else "skipped"
        # A paused feature or provider: the job waits, parked, with nothing sent or reserved.
        paused = pause_reason(waiting)
        if paused is not None:
            job_park(job_id=waiting.id, rq_job_id=rq_job_id, reason=paused)
            return "paused"
        # Each provider has its own breaker: an open one holds only its own provider's jobs.
        provider_name = provider_name_for_model(model=waiting.run_model)
        gate = breaker_gate(provider=provider_name)
        if gate == "open":
            fallback = fallback_model(waiting)
            if fallback is not None:
                job_fall_back(
                    job_id=waiting.id,
                    rq_job_id=rq_job_id,
                    to_model=fallback,
                    reason=f"the {provider_name} circuit breaker is open",
                )
                return "fell_back"
            logger.info("job %s held: the %s circuit breaker is open", job_id, provider_name)
            return "held"
        attempt = waiting.attempts + 1
        bind_log_context(
            feature=waiting.feature,
            model=waiting.run_model,
            attempt=attempt,
            # The attempt's lines name the span it is exported as (tracing/context.py).
            trace_id=trace_id_of(waiting.traceparent),
            span_id=attempt_span_id(waiting.traceparent, attempt),
        )
        if waiting.concurrency_key:
            with _concurrency_slot(waiting) as taken:
                if not taken:
                    delay = settings.LLM_CONCURRENCY_KEY_WAIT_SECONDS * random.uniform(1, 1.5)
                    job_hold(
                        job_id=waiting.id,
                        rq_job_id=rq_job_id,
                        delay_seconds=delay,
                        reason="its concurrency_key is taken by other running jobs",
                        kind="concurrency_key",
                    )
                    return "key_busy"
                return _start(
                    waiting,
                    attempt=attempt,
                    rq_job_id=rq_job_id,
                    gate=gate,
                    lock=lock,
                    started=started,
                )
        return _start(
            waiting, attempt=attempt, rq_job_id=rq_job_id, gate=gate, lock=lock, started=started
        )
    finally:
        try:
            lock.release()
        except (LockError, RedisError):
            pass


def _lock_acquire(lock: Any, *, job_id: str, rq_job_id: str | None) -> bool:
    """Take the job's lock. A copy that hands its job on (a hold for the limiter, a retry, a
    fallback) schedules the job's next RQ job before it lets go of the lock, so a short hold's RQ
    job may start while the lock is still held: the RQ job the row points at waits for the hand-
    over, up to ``LOCK_HANDOVER_SECONDS``. Leaving at once stranded the job until the reconciler's
    grace had passed (a test run under load: held 0.11 s, the lock let go 0.57 s later). Any
    other copy (a stray or a duplicate of a live attempt) leaves at once."""
    if lock.acquire(blocking=False):
        return True
    if rq_job_id is None:
        return False
    close_old_connections()
    if job_for_run(job_id=job_id, rq_job_id=rq_job_id) is None:
        return False
    release_connection()  # no connection is held while it waits
    return bool(lock.acquire(blocking=True, blocking_timeout=LOCK_HANDOVER_SECONDS))


@contextmanager
def _concurrency_slot(job: LlmJob) -> Iterator[bool]:
    """A running slot of the job's concurrency_key for the whole attempt (jobs/concurrency_keys.py),
    given back at its end; yields whether it was taken."""
    job_id = str(job.id)
    taken = slot_acquire(concurrency_key=job.concurrency_key, job_id=job_id)
    try:
        yield taken
    finally:
        if taken:
            try:
                slot_release(concurrency_key=job.concurrency_key, job_id=job_id)
            except RedisError:
                logger.warning("job %s: its concurrency slot will free itself at lease end", job_id)


def _start(
    waiting: LlmJob,
    *,
    attempt: int,
    rq_job_id: str | None,
    gate: str,
    lock: Any,
    started: float,
) -> str:
    """Reserve, claim and run one attempt of a job that may start now."""
    job_id = str(waiting.id)
    # A slot of the shared rate limiter first (ratelimits/): a job that would wait longer than
    # a moment goes back on the queue until its slot, using no attempt and making no call.
    grant = rate_limit_acquire(job=waiting, attempt=attempt)
    if grant.hold_seconds is not None:
        # Waited too long on this model's limits: the feature's next model, if it has one.
        fallback = (
            fallback_model(waiting)
            if moves_after_wait(waiting, hold_seconds=grant.hold_seconds)
            else None
        )
        if fallback is not None:
            job_fall_back(
                job_id=waiting.id,
                rq_job_id=rq_job_id,
                to_model=fallback,
                reason=f"the rate limiter would hold it past LLM_FALLBACK_AFTER_WAIT_SECONDS "
                f"({grant.reason})",
            )
            return "fell_back"
        job_hold(
            job_id=waiting.id,
            rq_job_id=rq_job_id,
            delay_seconds=grant.hold_seconds,
            reason=f"rate limit ({grant.reason})",
            limiter=True,
        )
        return "rate_limited"
    # The attempt's worst case is reserved against every budget before the claim: a job that
    # does not fit uses no attempt and makes no call.
    reservation = budget_reserve(job=waiting, attempt=attempt)
    if isinstance(reservation, BudgetRefusal):
        refusal = reservation
        rate_limit_release(grant)
        job_budget_refused(job_id=waiting.id, rq_job_id=rq_job_id, refusal=refusal)
        logger.info("job %s: budget %s (%s)", job_id, refusal.action, refusal.message)
        return f"budget_{refusal.action}"
    job = job_claim(job_id=job_id, rq_job_id=rq_job_id, seen=waiting, reservation=reservation)
    if job is None or job.attempts != attempt:
        budget_release(reservation=reservation)  # its own: never the winning copy's
        rate_limit_release(grant)
        if job is None and deadline_passed(waiting.deadline):
            # Its deadline passed while it waited for its slot: it ends without a call.
            job_deadline_exceeded(job_id=waiting.id, rq_job_id=rq_job_id)
            return "deadline_exceeded"
        logger.info("job %s is not due for this RQ job (%s); nothing to run", job_id, rq_job_id)
        return "skipped"
    return _attempt(job, probe=gate == "probe", lock=lock, grant=grant, started=started)


def _attempt(
    job: LlmJob,
    *,
    probe: bool,
    lock: Any,
    grant: RateLimitGrant | None = None,
    started: float | None = None,
) -> str:
    release_connection()  # no connection is held while the provider answers
    provider = provider_for(job.run_model)
    deadline = CallDeadline(provider.call_deadline_for(job.max_tokens))
    record = _RecordWindow(job=job, started=time.monotonic() if started is None else started)
    live = LiveOutput(job_id=job.id, user_id=job.user_id, attempt=job.attempts)
    with (
        cancel_watched(job.id, deadline.cancel) as cancel_now,
        Heartbeat(
            job.id, lock, job.concurrency_key, deadline, cancel_now, attempt=job.attempts
        ) as heartbeat,
    ):
        try:
            return _call_and_record(
                job, provider, deadline, record, heartbeat, live, probe=probe, grant=grant
            )
        finally:
            if live.kept or deadline.cancelled:  # it wrote the keys (or a cancel key may exist)
                live_keys_clear(job.id)


def _call_and_record(
    job: LlmJob,
    provider: Any,
    deadline: CallDeadline,
    record: "_RecordWindow",
    heartbeat: Heartbeat,
    live: LiveOutput,
    *,
    probe: bool,
    grant: RateLimitGrant | None,
) -> str:
    try:
        if grant is not None:
            # Its paced slot may still be ahead (or a 429's pause): the claim is kept while
            # it waits, as long as that wait can last, and the call's deadline counts from
            # when the request leaves, never from the claim.
            heartbeat.hold_until(time.monotonic() + _send_wait_bound())
            rate_limit_sent(grant)
            heartbeat.call_starts()
        try:
            outcome = provider.call(
                ProviderRequest(
                    body=job.provider_request(),
                    idempotency_key=str(job.id),
                    read_timeout=provider.read_timeout_for(job.max_tokens),
                    deadline=deadline,
                    on_text=live,
                    kind=job.kind,
                )
            )
        finally:
            config_recheck()  # a change made during the call is seen by its record
            live.close()
            # The call is over (answered, failed or cut off at its deadline): the claim
            # holds while its result is recorded, and no longer.
            heartbeat.hold_until(record.until(), recording=True)
        answered_at = timezone.now()
        if grant is not None:
            rate_limit_settle(grant, outcome)
        bind_log_context(provider_request_id=outcome.request_id)
        if outcome.kind == "cancelled":
            _persist(
                lambda: job_cancel_running(
                    job_id=job.id, attempt=job.attempts, result=_cancelled(outcome)
                ),
                until=record.until(),
            )
        elif outcome.kind == "success":
            _persist(
                lambda: job_complete(
                    job_id=job.id,
                    attempt=job.attempts,
                    result=SuccessResult(
                        text=outcome.text,
                        content=outcome.content,
                        stop_reason=outcome.stop_reason,
                        usage=outcome.usage,
                        http_status=outcome.http_status,
                        request_id=outcome.request_id,
                        latency_ms=outcome.latency_ms,
                        embeddings=outcome.embeddings,
                    ),
                ),
                until=record.until(),
            )
            if probe:
                breaker_close(provider=provider.name, reason=f"probe call succeeded (job {job.id})")
        else:
            _persist(
                lambda: job_attempt_failed(
                    job_id=job.id,
                    attempt=job.attempts,
                    failure=failure_from_outcome(outcome, answered_at=answered_at),
                ),
                until=record.until(),
            )
        return outcome.kind
    except Exception as exc:
        # Whatever broke (a 200 whose body is not JSON, a bug in our own code), the attempt
        # is booked and the job goes through the retry policy with the real cause: never
        # left running.
        logger.exception("job %s attempt %s raised", job.id, job.attempts)
        heartbeat.hold_until(record.until(), recording=True)
        cause = f"{type(exc).__name__}: {exc}"
        failure = AttemptFailure(
            classification=classify(kind="unexpected_error"),
            record=AttemptRecord(
                outcome=CostEntry.Outcome.ERROR,
                error_type=type(exc).__name__,
                message=f"Unexpected error during the attempt: {cause}"[:2000],
                # The request may have reached the provider and been billed.
                maybe_billed=True,
            ),
        )
        _persist(
            lambda: job_attempt_failed(job_id=job.id, attempt=job.attempts, failure=failure),
            until=record.until(),
        )
        return "error"


class _RecordWindow:
    """How long recording an attempt's result may take: ``LLM_RECORD_RETRY_SECONDS`` from the
    call's end, and never past a margin before the RQ job timeout, where a forking worker's work
    horse is killed. The heartbeat holds the job's claim for exactly this long, so that nothing
    takes the job over while its paid answer waits for the database."""

    def __init__(self, *, job: LlmJob, started: float) -> None:
        self.rq_ends_at = started + job_timeout_for(job.max_tokens)
        self._until: float | None = None

    def until(self) -> float:
        if self._until is None:
            self._until = min(
                time.monotonic() + settings.LLM_RECORD_RETRY_SECONDS,
                self.rq_ends_at - settings.LLM_JOB_TIMEOUT_MARGIN / 2,
            )
        return self._until


def _persist(write: Callable[[], T], *, until: float | None = None) -> T:
    """Run a recording transition, riding out a short database outage: a paid result is not
    thrown away because the database blinked. Gives up at ``until`` (monotonic; by default
    ``LLM_RECORD_RETRY_SECONDS`` from now); the reconciler then recovers the attempt as of
    unknown outcome."""
    deadline = until if until is not None else time.monotonic() + settings.LLM_RECORD_RETRY_SECONDS
    retrying = Retrying(
        retry=retry_if_exception_type(DatabaseError),
        # 0.5 s, doubled after each failure, at most 10 s between two tries.
        wait=wait_exponential(multiplier=0.5, max=10),
        # Never a wait that would end past the deadline: the last error is raised instead.
        stop=lambda state: time.monotonic() + state.upcoming_sleep > deadline,
        before_sleep=_before_persist_retry,
        reraise=True,
    )
    return retrying(write)


def _before_persist_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    logger.warning("recording an attempt failed on the database; retrying", exc_info=error)
    connection.close()


def _cancelled(outcome: ProviderOutcome) -> CancelledResult:
    return CancelledResult(
        text=outcome.text,
        content=outcome.content,
        usage=outcome.usage,
        output_tokens_bound=outcome.output_tokens_bound,
        maybe_billed=outcome.maybe_billed,
        http_status=outcome.http_status,
        request_id=outcome.request_id,
        latency_ms=outcome.latency_ms,
        message=outcome.message,
    )


def failure_from_outcome(
    outcome: ProviderOutcome, *, answered_at: datetime | None = None
) -> AttemptFailure:
    """Classify a failed call and say what the ledger books for it."""
    if outcome.kind == "error_response":
        ledger_outcome = CostEntry.Outcome.ERROR_RESPONSE
    elif outcome.outcome_unknown:
        ledger_outcome = CostEntry.Outcome.UNKNOWN
    else:
        ledger_outcome = CostEntry.Outcome.CONNECTION_ERROR
    return AttemptFailure(
        classification=classify(
            kind=outcome.kind,
            http_status=outcome.http_status,
            error_type=outcome.error_type,
            error_code=outcome.error_code,
            message=outcome.message,
        ),
        record=AttemptRecord(
            outcome=ledger_outcome,
            http_status=outcome.http_status,
            error_type=outcome.error_type,
            message=outcome.message,
            request_id=outcome.request_id,
            latency_ms=outcome.latency_ms,
            usage=outcome.usage,
            maybe_billed=outcome.maybe_billed,
            output_tokens_bound=outcome.output_tokens_bound,
        ),
        retry_after=outcome.retry_after,
        answered_at=answered_at,
    )
