"""Retry, hold, fall back and dead-letter: a waiting job that may not start now (budget,
deadline, limiter), moves to the feature's next model, or is requeued from the DLQ.

Part of the job services (jobs/services/__init__.py has the transition table)."""

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from api.errors import Conflict
from jobs import breaker
from jobs.admission import check_against_price_table
from jobs.dead_letter import DeadLetter, dead_letter_attach
from jobs.deadlines import (
    deadline_exceeded_message,
    deadline_hold_seconds,
    deadline_passed,
    deadline_stop,
)
from jobs.models import JobWait, LlmJob
from jobs.services.submit import job_enqueue
from jobs.transitions import Transition, transition_committed
from ledger.budgets import BudgetRefusal
from providers.selectors import provider_name_for_model

logger = logging.getLogger(__name__)


@transaction.atomic
def job_budget_refused(
    *, job_id: uuid.UUID, rq_job_id: str | None, refusal: BudgetRefusal
) -> LlmJob | None:
    """A waiting job whose next attempt does not fit a budget; no provider call was made, so no
    attempt is used and no ledger row written.

    ``wait``: it would fit once the calls in flight settle: retried shortly. ``defer``: held as
    ``retrying`` until the window resets. ``reject``: dead-lettered as ``budget_exceeded``
    (WARNING), or ``max_cost_exceeded`` when it is the job's own cap that the attempt would
    pass. Returns None when the job moved on meanwhile.
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
        return _hold(
            job, delay_seconds=delay, reason=f"budget ({refusal.message})", kind=JobWait.Kind.BUDGET
        )
    classification = classify(kind=refusal.code)
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
            _record_wait(
                job,
                kind=JobWait.Kind.BUDGET,
                seconds=(refusal.retry_at - timezone.now()).total_seconds(),
            )
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
    kind: str = "rate_limit",
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
    return _hold(job, delay_seconds=delay_seconds, reason=reason, kind=kind)


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


def _hold(job: LlmJob, *, delay_seconds: float, reason: str, kind: str) -> LlmJob:
    """A waiting job back on the queue after ``delay_seconds``, its status unchanged. Inside
    the caller's transaction, the job's row locked."""
    # A hold never keeps a job past its deadline: the runner's look just after it ends the job.
    delay = max(0.001, deadline_hold_seconds(job.deadline, delay_seconds=delay_seconds))
    _record_wait(job, kind=kind, seconds=delay)
    if job.status == LlmJob.Status.RETRYING:
        job.next_attempt_at = timezone.now() + timedelta(seconds=delay)
        job.save(update_fields=["next_attempt_at"])
    job_enqueue(job=job, delay_seconds=delay)
    logger.info("job %s held for %.2fs: %s", job.id, delay, reason, extra={"job_id": str(job.id)})
    return job


def _record_wait(job: LlmJob, *, kind: str, seconds: float) -> None:
    """The hold on the job's timeline (its trace's wait spans, the admin): a hold of the same
    kind that follows the last one within a second extends its row instead of adding one (pacing
    may hold a job many times). Inside the transition, the job's row locked."""
    now = timezone.now()
    last = JobWait.objects.filter(job=job).order_by("-started_at").first()
    if (
        last is not None
        and last.kind == kind
        and last.started_at + timedelta(seconds=last.seconds + 1) >= now
    ):
        last.seconds = (now - last.started_at).total_seconds() + max(0.0, seconds)
        last.holds += 1
        last.save(update_fields=["seconds", "holds"])
        return
    JobWait.objects.create(job=job, kind=kind, started_at=now, seconds=max(0.0, seconds))


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


@transaction.atomic
def job_requeue(*, job: LlmJob, model: str | None = None) -> bool:
    """Give a failed job a fresh retry budget and queue it again under the same id.

    Idempotent: only a failed job moves, so requeuing twice runs it once. Returns whether this
    call moved it. Redis being down does not fail it (see ``job_enqueue``).
    """
    if job.pruned_at is not None:
        raise Conflict(
            "This job's prompt was pruned (llm_prune, LLM_RETENTION_DAYS): it cannot run again. "
            "Submit it anew.",
            code="job_pruned",
            detail={"job_id": str(job.id), "pruned_at": job.pruned_at.isoformat()},
        )
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
