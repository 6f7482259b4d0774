"""Every transition of an LlmJob, one ``job_<verb>`` service each, and nowhere else.

    submit           -> queued                       job_submit
    queued|retrying  -> running                      job_claim
    running          -> completed                    job_complete
    running          -> retrying | failed            job_attempt_failed (retry service decides)
    running (lost)   -> retrying | failed            job_recover (the reconciler)
    queued|retrying  -> failed                       job_deadline_exceeded (not started in time)
    queued|retrying  -> cancelled                    job_cancel
    running          -> cancelled                    job_cancel(running=True) asks the worker,
                                                     whose job_cancel_running ends it
    failed           -> queued                       job_requeue (the DLQ)
    queued|retrying  -> (put on the queue again)     job_enqueue / job_enqueue_again
    queued|retrying  -> (on the feature's next model) job_fall_back (jobs/fallbacks.py decides;
                                                     job_attempt_failed moves a failed attempt)
    queued|retrying  -> running in a provider batch  job_batch_claim (deferred/ decides)
    running (batch)  -> retrying in real time        job_run_in_real_time (expired, deadline)
    running (batch)  -> cancelled                    job_cancel (at once: no stream to close)
    (moved on)       -> a superseded batch row       job_batch_superseded (ledger only)
    queued|retrying  -> (deferred to real time)      job_undefer (its deadline is too near)

Each transition is one transaction that writes only the fields it changes, books the attempt in
the ledger (``ledger/services.py``) when it ends one, and ends in ``transition_committed``: the
one after-commit hook that WebSocket events, metrics and budgets subscribe to. ``jobs/runner.py``
only holds the lock, beats the heartbeat and makes the call.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from redis.exceptions import RedisError

from api.errors import Conflict
from embeddings.storage import vectors_store
from jobs import breaker, message_refs
from jobs.admission import (
    check_against_price_table,
    check_budgets_not_spent,
    idempotency_key_hash,
    policy_defaults,
)
from jobs.cancellation import cancel_signal_on_commit
from jobs.dead_letter import DeadLetter, dead_letter_attach
from jobs.deadlines import (
    deadline_exceeded_message,
    deadline_hold_seconds,
    deadline_is_near,
    deadline_passed,
    deadline_stop,
)
from jobs.fallbacks import moves_after_failure
from jobs.models import JobTag, LlmJob
from jobs.retry_policy import Classification, decide
from jobs.selectors import jobs_runnable
from jobs.tags import job_tag_rows
from jobs.timeouts import job_timeout_for
from jobs.transitions import Transition, transition_committed, transitions_committed
from jobs.validation import JobRequest, validate_job_request
from ledger.budgets import BudgetRefusal, Reservation, budget_claim
from ledger.models import CostEntry
from ledger.services import (
    AttemptRecord,
    cost_entry_correct_late_result,
    cost_entry_record_attempt,
)
from llmops.queues import LLM_QUEUE, RUN_LLM_JOB_TASK
from providers.selectors import provider_name_for_model
from ratelimits.configured_limits import is_priority_feature
from runtime.redis_clients import queue as rq_queue

__all__ = [
    "AttemptFailure",
    "CancelledResult",
    "SuccessResult",
    "job_attempt_failed",
    "job_batch_claim",
    "job_batch_superseded",
    "job_budget_refused",
    "job_build",
    "job_cancel",
    "job_cancel_running",
    "job_claim",
    "job_complete",
    "job_deadline_exceeded",
    "job_enqueue",
    "job_enqueue_again",
    "job_fall_back",
    "job_hold",
    "job_recover",
    "job_requeue",
    "job_rq_options",
    "job_run_in_real_time",
    "job_undefer",
    "job_submit",
]

logger = logging.getLogger(__name__)


@dataclass
class SuccessResult:
    text: str
    stop_reason: str
    usage: dict[str, int]
    http_status: int | None
    request_id: str
    latency_ms: int
    content: list[dict[str, Any]] | None = None
    """Every content block of the answer (text, thinking, tool_use, ...)."""
    embeddings: list[bytes] | None = None
    """An embedding job's vectors (float32 little-endian each), kept in embeddings/."""
    batch: bool = False
    """The answer of a provider message batch item: booked at the batch price."""


@dataclass
class CancelledResult:
    """What a cancelled call streamed before its stream was closed."""

    text: str
    content: list[dict[str, Any]]
    usage: dict[str, int]
    output_tokens_bound: int | None
    maybe_billed: bool
    http_status: int | None
    request_id: str
    latency_ms: int
    message: str


@dataclass
class AttemptFailure:
    """A failed attempt: how the retry policy classified it, and what the ledger books."""

    classification: Classification
    record: AttemptRecord
    retry_after: float | None = None
    answered_at: datetime | None = None
    """When the provider's answer came (wall clock), if it came: an account-wide failure answered
    before the breaker was last closed is old news and does not open it again."""


# --- Enqueueing ---------------------------------------------------------------------------------


def job_enqueue(*, job: LlmJob, delay_seconds: float | None = None) -> None:
    """Point the row at a fresh RQ job id and push that RQ job once the transaction commits, so
    a worker never sees a job the database does not have yet.

    Redis being down never fails the caller: the row is committed, its RQ job is missing, and
    the reconciler enqueues it again once Redis answers (the database is the source of truth).

    A job of an ``LLM_PRIORITY_FEATURES`` feature goes to the front of the queue (when it is
    due, for a delayed one): the llm queue is first in, first out, and an interactive job must
    not wait behind a batch of thousands (ratelimits/ then shares the limits by weight). So
    does a job whose deadline is near when it becomes due (jobs/deadlines.py).
    """
    rq_job_id = uuid.uuid4().hex
    now = timezone.now()
    LlmJob.objects.filter(id=job.id).update(rq_job_id=rq_job_id, enqueued_at=now)
    job.rq_job_id, job.enqueued_at = rq_job_id, now
    _push_on_commit(job, delay_seconds=delay_seconds)


def job_rq_options(job: LlmJob, *, delay_seconds: float | None = None) -> dict[str, Any]:
    """How a job goes on the llm queue (``Queue.enqueue`` options): under the RQ job id its row
    points at, with an RQ timeout scaled from its ``max_tokens``, at the front for a priority
    feature or a deadline at most ``LLM_DEADLINE_FRONT_SECONDS`` after it becomes due (after
    ``delay_seconds``). Also used by the bulk submit (jobs/bulk.py)."""
    return {
        "job_id": job.rq_job_id,
        "job_timeout": job_timeout_for(job.max_tokens),
        "description": f"llm job {job.id}",
        "at_front": is_priority_feature(job.feature)
        or deadline_is_near(job.deadline, delay_seconds=delay_seconds),
    }


def _push_on_commit(job: LlmJob, *, delay_seconds: float | None = None) -> None:
    """Push the RQ job the row already points at (``rq_job_id``) once the transaction commits."""
    if job.mode == LlmJob.Mode.DEFERRED:
        return  # the deferred loop sends it in a provider batch (deferred/services.py)
    job_id, options = str(job.id), job_rq_options(job, delay_seconds=delay_seconds)

    def push() -> None:
        try:
            queue = rq_queue(LLM_QUEUE)
            if delay_seconds:
                queue.enqueue_in(
                    timedelta(seconds=delay_seconds), RUN_LLM_JOB_TASK, job_id, **options
                )
            else:
                queue.enqueue(RUN_LLM_JOB_TASK, job_id, **options)
        except RedisError as exc:
            logger.warning(
                "job %s: Redis refused the enqueue (%s); the reconciler will enqueue it",
                job_id,
                type(exc).__name__,
                extra={"job_id": job_id},
            )

    transaction.on_commit(push)


@transaction.atomic
def job_enqueue_again(*, job_id: uuid.UUID, lost_rq_job_id: str) -> bool:
    """Enqueue a waiting job whose RQ job Redis lost (or whose retry is overdue). Returns False
    when the job moved on meanwhile (claimed, cancelled, or enqueued again by someone else)."""
    job = LlmJob.objects.select_for_update().filter(id=job_id).first()
    if job is None or job.status not in LlmJob.WAITING_STATUSES or job.rq_job_id != lost_rq_job_id:
        return False
    job_enqueue(job=job)
    return True


# --- Submit -------------------------------------------------------------------------------------


def job_submit(
    *,
    user: User,
    data: Any = None,
    idempotency_key: str | None = None,
    messages_ref: dict[str, Any] | None = None,
    api_key_id: int | None = None,
    request: JobRequest | None = None,
) -> tuple[LlmJob, bool]:
    """Validate, insert, enqueue on commit. Returns (job, created); a repeated idempotency key
    returns the first job. Keys compare byte for byte: ``Key-A`` and ``key-a`` are two keys.

    ``messages_ref`` (jobs/message_refs.py ``make_ref`` of ``data["messages"]``): the job stores
    the reference instead of its messages, which are validated here all the same.
    ``api_key_id``: the API key that submits it (recorded on the job and its ledger rows, and
    its budget applies). ``request``: a body validated already, instead of ``data`` (an
    embeddings submit, embeddings/validation.py)."""
    if request is None:
        request = validate_job_request(data)
    check_against_price_table(model=request.model, max_tokens=request.max_tokens, kind=request.kind)
    check_budgets_not_spent(feature=request.feature, user=user, api_key_id=api_key_id)
    fingerprint = request.fingerprint()
    request = policy_defaults(request)

    key_hash = None
    if idempotency_key:
        key_hash = idempotency_key_hash(idempotency_key)
        existing = LlmJob.objects.filter(user=user, idempotency_key_hash=key_hash).first()
        if existing is not None:
            return _replay(existing, fingerprint), False

    try:
        with transaction.atomic():
            job = job_build(
                user=user,
                request=request,
                fingerprint=fingerprint,
                idempotency_key=idempotency_key or None,
                idempotency_key_hash=key_hash,
                api_key_id=api_key_id,
            )
            if messages_ref is not None:
                if messages_ref.get("sha256") != message_refs.digest(request.messages):
                    raise message_refs.MessagesRefError("messages_ref was made from other messages")
                job.messages, job.messages_ref = [], messages_ref
                job._resolved_messages = request.messages  # type: ignore[attr-defined]
            job.save(force_insert=True)
            JobTag.objects.bulk_create(job_tag_rows([job]))
            # Notified before the push: the "queued" event must leave before a worker's "running".
            transition_committed(job, Transition.SUBMITTED)
            _push_on_commit(job)
    except IntegrityError:
        # Two submits with the same key raced; the first insert won.
        if not key_hash:
            raise
        existing = LlmJob.objects.get(user=user, idempotency_key_hash=key_hash)
        return _replay(existing, fingerprint), False
    return job, True


def job_build(
    *,
    user: User,
    request: JobRequest,
    fingerprint: str,
    idempotency_key: str | None = None,
    idempotency_key_hash: str | None = None,
    api_key_id: int | None = None,
) -> LlmJob:
    """The row of a new job, not saved yet: inserted already pointing at its RQ job, so no
    second write says so (``job_submit``, and many at once in jobs/bulk.py)."""
    return LlmJob(
        rq_job_id=uuid.uuid4().hex,
        enqueued_at=timezone.now(),
        user=user,
        api_key_id=api_key_id,
        feature=request.feature,
        model=request.model,
        current_model=request.model,
        mode=request.mode or LlmJob.Mode.REALTIME,
        kind=request.kind,
        input=request.input,
        messages=request.messages,
        system=request.system,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        metadata=request.metadata or {},
        params=request.params or {},
        concurrency_key=request.concurrency_key or "",
        deadline=request.deadline,
        tags=request.tags or [],
        idempotency_key=idempotency_key,
        idempotency_key_hash=idempotency_key_hash,
        request_fingerprint=fingerprint,
    )


def _replay(job: LlmJob, fingerprint: str) -> LlmJob:
    if job.request_fingerprint != fingerprint:
        raise Conflict(
            "This Idempotency-Key was used with a different request body.",
            code="idempotency_conflict",
            detail={"job_id": str(job.id)},
        )
    return job


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
        transition_committed(job, Transition.CLAIMED)
    return job


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
    failure.record.retry_delay_seconds = 0.0 if move_to else decision.delay_seconds
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
        assert decision.delay_seconds is not None
        at = timezone.now() + timedelta(seconds=decision.delay_seconds)
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


@transaction.atomic
def job_budget_refused(
    *, job_id: uuid.UUID, rq_job_id: str | None, refusal: BudgetRefusal
) -> LlmJob | None:
    """A waiting job whose next attempt does not fit a budget; no provider call was made, so no
    attempt is used and no ledger row written.

    ``wait``: it would fit once the calls in flight settle: retried shortly. ``defer``: held as
    ``retrying`` until the window resets. ``reject``: dead-lettered as ``budget_exceeded``
    (WARNING). Returns None when the job moved on meanwhile.
    """
    from jobs.retry_policy import classify

    job = LlmJob.objects.select_for_update().get(id=job_id)
    if job.status not in LlmJob.WAITING_STATUSES or (
        rq_job_id is not None and job.rq_job_id != rq_job_id
    ):
        return None
    if refusal.action == "wait":
        # A hold, not a status change: no attempt was made, so a "retrying" here would be a
        # transition the ledger cannot show (the metrics are checked against it).
        delay = (refusal.retry_at - timezone.now()).total_seconds()
        return _hold(job, delay_seconds=delay, reason=f"budget ({refusal.message})")
    classification = classify(kind="budget_exceeded")
    job.error_code = classification.reason_code
    job.error_http_status = None
    job.error_message = refusal.message[:2000]
    job.error_severity = classification.severity
    fields = ["status", "next_attempt_at", "error_code", "error_http_status", "error_message"]
    fields.append("error_severity")
    message = refusal.message
    if refusal.action == "defer":
        stopped = deadline_stop(job, at=refusal.retry_at, fields=fields, message=message)
        if stopped is None:
            return _schedule_retry(job, at=refusal.retry_at, fields=fields)
        message = stopped
    return _dead_letter(
        job,
        fields=fields,
        severity=classification.severity,
        reason_code=classification.reason_code,
        message=message,
    )


@transaction.atomic
def job_deadline_exceeded(*, job_id: uuid.UUID | str, rq_job_id: str | None) -> LlmJob | None:
    """queued|retrying -> failed: the job was not started by its deadline. No provider call was
    made, so no attempt is used and no ledger row written; dead-lettered as
    ``deadline_exceeded`` (WARNING). Returns None when the job moved on meanwhile or its
    deadline has not passed."""
    from jobs.retry_policy import classify

    job = LlmJob.objects.select_for_update().get(id=job_id)
    if (
        job.status not in LlmJob.WAITING_STATUSES
        or (rq_job_id is not None and job.rq_job_id != rq_job_id)
        or job.deadline is None
        or not deadline_passed(job.deadline)
    ):
        return None
    classification = classify(kind="deadline_exceeded")
    message = deadline_exceeded_message(job.deadline)
    job.error_code = classification.reason_code
    job.error_http_status = None
    job.error_message = message
    job.error_severity = classification.severity
    fields = ["status", "next_attempt_at", "error_code", "error_http_status", "error_message"]
    fields.append("error_severity")
    return _dead_letter(
        job,
        fields=fields,
        severity=classification.severity,
        reason_code=classification.reason_code,
        message=message,
    )


@transaction.atomic
def job_hold(
    *,
    job_id: uuid.UUID | str,
    rq_job_id: str | None,
    delay_seconds: float,
    reason: str,
    limiter: bool = False,
) -> LlmJob | None:
    """A waiting job that may not start yet (a rate limit's next slot, its concurrency key held
    by another job) goes back on the queue after ``delay_seconds`` under a fresh RQ job id.

    No attempt is used and no ledger row written; the status does not change, so there is no
    transition. A ``retrying`` job's ``next_attempt_at`` moves to the new time, so the reconciler
    does not take it for an overdue retry. Returns None when the job moved on meanwhile.

    ``limiter``: the rate limiter holds it; the first such hold on its model is remembered
    (``limiter_wait_since``), for the fallback after ``LLM_FALLBACK_AFTER_WAIT_SECONDS``.
    """
    job = LlmJob.objects.select_for_update().get(id=job_id)
    if job.status not in LlmJob.WAITING_STATUSES or (
        rq_job_id is not None and job.rq_job_id != rq_job_id
    ):
        return None
    if limiter and job.limiter_wait_since is None:
        job.limiter_wait_since = timezone.now()
        job.save(update_fields=["limiter_wait_since"])
    return _hold(job, delay_seconds=delay_seconds, reason=reason)


@transaction.atomic
def job_fall_back(
    *, job_id: uuid.UUID | str, rq_job_id: str | None, to_model: str, reason: str
) -> LlmJob | None:
    """A waiting job moves to its feature's next model (jobs/fallbacks.py) and goes back on the
    queue at once: its provider's breaker is open, or the limiter would hold it too long. No
    attempt is used; the status does not change. None when the job moved on meanwhile."""
    job = LlmJob.objects.select_for_update().get(id=job_id)
    if job.status not in LlmJob.WAITING_STATUSES or (
        rq_job_id is not None and job.rq_job_id != rq_job_id
    ):
        return None
    logger.warning(
        "job %s falls back from %s to %s: %s",
        job.id,
        job.run_model,
        to_model,
        reason,
        extra={"job_id": str(job.id), "fallback_model": to_model},
    )
    _move_to(job, to_model)
    fields = ["current_model", "model_failures", "retry_counts", "limiter_wait_since"]
    if job.status == LlmJob.Status.RETRYING:
        job.next_attempt_at = timezone.now()
        fields.append("next_attempt_at")
    job.save(update_fields=fields)
    job_enqueue(job=job)
    return job


def _move_to(job: LlmJob, model: str) -> None:
    """The job's next attempts run on ``model``, with that model's own retry schedule (the
    global ``LLM_MAX_ATTEMPTS`` still bounds the whole job). Fields only: the caller saves."""
    job.current_model = model
    job.model_failures = 0
    job.retry_counts = {}
    job.limiter_wait_since = None


def _hold(job: LlmJob, *, delay_seconds: float, reason: str) -> LlmJob:
    """A waiting job back on the queue after ``delay_seconds``, its status unchanged. Inside
    the caller's transaction, the job's row locked."""
    # A hold never keeps a job past its deadline: the runner's look just after it ends the job.
    delay = max(0.001, deadline_hold_seconds(job.deadline, delay_seconds=delay_seconds))
    if job.status == LlmJob.Status.RETRYING:
        job.next_attempt_at = timezone.now() + timedelta(seconds=delay)
        job.save(update_fields=["next_attempt_at"])
    job_enqueue(job=job, delay_seconds=delay)
    logger.info("job %s held for %.2fs: %s", job.id, delay, reason, extra={"job_id": str(job.id)})
    return job


def _schedule_retry(
    job: LlmJob, *, at: datetime, fields: list[str], via: Transition | None = None
) -> LlmJob:
    """running|waiting -> retrying at ``at``, its RQ job scheduled. Inside the transition."""
    job.status = LlmJob.Status.RETRYING
    job.next_attempt_at = at
    job.save(update_fields=fields)
    # Notified before the push, so the "retrying" event leaves before the next attempt's.
    transition_committed(job, via or Transition.RETRY_SCHEDULED)
    # Always through rq's scheduler, even when the (scaled) delay has already run out while the
    # transition was written: a retry is never pushed ahead of jobs already waiting.
    job_enqueue(job=job, delay_seconds=max(0.001, (at - timezone.now()).total_seconds()))
    return job


def _dead_letter(
    job: LlmJob, *, fields: list[str], via: Transition | None = None, **failure: Any
) -> LlmJob:
    """-> failed. Inside the transition, whose subscriber in dlq/ writes the job's
    FailureRecord (the DLQ entry) from the attached ``DeadLetter``."""
    job.status = LlmJob.Status.FAILED
    job.completed_at = timezone.now()
    job.next_attempt_at = None
    job.save(update_fields=[*fields, "completed_at"])
    dead_letter_attach(job, DeadLetter(**failure))
    transition_committed(job, via or Transition.DEAD_LETTERED)
    return job


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
    # A job waiting in a provider batch has no stream to close: it is cancelled at once, and its
    # batch result, if it comes, is booked superseded (deferred/services.py).
    cancellable = Q(status__in=LlmJob.WAITING_STATUSES) | Q(
        status=LlmJob.Status.RUNNING,
        mode=LlmJob.Mode.DEFERRED,
        provider_batch__isnull=False,
    )
    updated = LlmJob.objects.filter(cancellable, id=job.id).update(
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


@transaction.atomic
def job_requeue(*, job: LlmJob, model: str | None = None) -> bool:
    """Give a failed job a fresh retry budget and queue it again under the same id.

    Idempotent: only a failed job moves, so requeuing twice runs it once. Returns whether this
    call moved it. Redis being down does not fail it (see ``job_enqueue``).
    """
    changes: dict[str, Any] = {}
    if model is not None and model != job.model:
        check_against_price_table(model=model, max_tokens=job.max_tokens)
        changes["model"] = model
    updated = LlmJob.objects.filter(id=job.id, status=LlmJob.Status.FAILED).update(
        status=LlmJob.Status.QUEUED,
        # A fresh start: its own model first again, the fallbacks after it.
        current_model=changes.get("model", job.model),
        model_failures=0,
        limiter_wait_since=None,
        cancel_requested_at=None,
        budget_attempts=0,
        retry_counts={},
        deadline_stopped=False,
        next_attempt_at=None,
        completed_at=None,
        error_code="",
        error_http_status=None,
        error_message="",
        error_severity="",
        **changes,
    )
    failed_reason, failed_on = job.error_code, job.run_model
    job.refresh_from_db()
    if updated:
        # Notified before the push, so the "queued" event leaves before a worker's "running".
        transition_committed(job, Transition.REQUEUED)
        # Enqueued next: its push then runs before the breaker's release of held jobs, which
        # would otherwise find this job's RQ job not yet pushed and enqueue a second copy.
        job_enqueue(job=job)
        if breaker.is_account_wide(failed_reason):
            # Requeuing a job the account-wide failure dead-lettered says "fixed, try again";
            # if it is not fixed, this job opens the breaker again at its first call.
            breaker.breaker_close(
                provider=provider_name_for_model(model=failed_on),
                reason=f"job {job.id} ({failed_reason}) requeued",
            )
    return bool(updated)


# --- Deferred jobs: provider message batches (deferred/services.py decides) --------------------


def _in_provider_batch(job: LlmJob) -> bool:
    """Running in a provider batch: no worker, no heartbeat; the deferred loop books it."""
    return (
        job.status == LlmJob.Status.RUNNING
        and job.mode == LlmJob.Mode.DEFERRED
        and job.provider_batch_id is not None
    )


def job_batch_claim(*, jobs: list[tuple[LlmJob, Reservation]], batch_id: int) -> list[LlmJob]:
    """queued|retrying -> running in provider batch ``batch_id``: each deferred job's next
    attempt, its budget reservation (at the batch price) claimed with it. Inside the caller's
    transaction (which also writes the batch's items); one savepoint per job, so a job that
    moved meanwhile or whose reservation was released stays out. Returns the claimed jobs, their
    ``attempts`` the attempt sent."""
    now = timezone.now()
    claimed = []
    for job, reservation in jobs:
        with transaction.atomic():
            if not LlmJob.objects.filter(
                id=job.id,
                status__in=LlmJob.WAITING_STATUSES,
                mode=LlmJob.Mode.DEFERRED,
                attempts=job.attempts,
            ).update(
                status=LlmJob.Status.RUNNING,
                attempts=F("attempts") + 1,
                budget_attempts=F("budget_attempts") + 1,
                started_at=Coalesce(F("started_at"), now),
                heartbeat_at=now,
                next_attempt_at=None,
                provider_batch_id=batch_id,
            ):
                continue
            if not budget_claim(reservation=reservation):
                transaction.set_rollback(True)
                continue
        job.status = LlmJob.Status.RUNNING
        job.attempts += 1
        job.budget_attempts += 1
        job.started_at = job.started_at or now
        job.heartbeat_at, job.next_attempt_at, job.provider_batch_id = now, None, batch_id
        claimed.append(job)
    if claimed:
        transitions_committed(claimed, Transition.CLAIMED)
    return claimed


@transaction.atomic
def job_run_in_real_time(
    *, job_id: uuid.UUID, attempt: int, record: AttemptRecord | None, reason: str
) -> LlmJob | None:
    """running in a provider batch -> retrying at once, in real time (pushed on the llm queue).

    ``record``: the batch attempt's result (expired, cancelled at the provider), booked now.
    None: the batch still runs (the job's deadline is near); its result is booked superseded when
    it comes. None when the job is no longer waiting on that attempt."""
    job = LlmJob.objects.select_for_update().get(id=job_id)
    if not _in_provider_batch(job) or job.attempts != attempt:
        return None
    fields = ["status", "next_attempt_at", "mode", "cost_usd"]
    if record is not None:
        record.retry_delay_seconds = 0.0
        entry = cost_entry_record_attempt(job=job, attempt=attempt, record=record)
        job.cost_usd = job.cost_usd + entry.cost_usd
    logger.warning(
        "job %s runs in real time: its provider batch item %s",
        job.id,
        "ran late for its deadline" if reason == "deadline" else f"ended {reason}",
        extra={"job_id": str(job.id)},
    )
    job.mode = LlmJob.Mode.REALTIME
    return _schedule_retry(job, at=timezone.now(), fields=fields)


@transaction.atomic
def job_batch_superseded(
    *, job_id: uuid.UUID, attempt: int, record: AttemptRecord, moved_to_real_time: bool
) -> LlmJob:
    """Book the result of a batch attempt whose job moved on (to real time, or cancelled): it
    was paid, so the ledger holds it, marked superseded; the job's answer is not changed."""
    job = LlmJob.objects.select_for_update().get(id=job_id)
    record.superseded = True
    if moved_to_real_time:
        # The move was this attempt's retry (its "retrying" transition; metrics/ count it so).
        record.retry_delay_seconds = 0.0
    entry = cost_entry_record_attempt(job=job, attempt=attempt, record=record)
    if entry.cost_usd:
        LlmJob.objects.filter(id=job.id).update(cost_usd=F("cost_usd") + entry.cost_usd)
    return job


@transaction.atomic
def job_undefer(*, job_id: uuid.UUID, reason: str) -> LlmJob | None:
    """A waiting deferred job runs in real time instead, now: its deadline is too near for a
    provider batch. No attempt was sent; the status does not change. None when it moved on."""
    job = LlmJob.objects.select_for_update().get(id=job_id)
    if job.status not in LlmJob.WAITING_STATUSES or job.mode != LlmJob.Mode.DEFERRED:
        return None
    job.mode = LlmJob.Mode.REALTIME
    fields = ["mode"]
    if job.status == LlmJob.Status.RETRYING:
        job.next_attempt_at = timezone.now()
        fields.append("next_attempt_at")
    job.save(update_fields=fields)
    logger.info("job %s runs in real time: %s", job.id, reason, extra={"job_id": str(job.id)})
    job_enqueue(job=job)
    return job
