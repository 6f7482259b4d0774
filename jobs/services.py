"""Writes on LlmJob: submit, enqueue, cancel, requeue. Running a job lives in jobs/runner.py."""

import logging
import uuid
from datetime import timedelta
from typing import Any

import django_rq
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs.models import LlmJob
from jobs.validation import validate_job_request
from ledger.selectors import price_for_model
from llmops.errors import Conflict, ValidationFailed

__all__ = ["job_cancel", "job_enqueue", "job_requeue", "job_submit"]

logger = logging.getLogger(__name__)

LLM_QUEUE = "llm"
TASK = "jobs.tasks.run_llm_job"


def job_enqueue(*, job: LlmJob, delay_seconds: float | None = None) -> None:
    """Point the row at a fresh RQ job id and put that RQ job on the queue once the surrounding
    transaction commits, so a worker never sees a job the database does not have yet."""
    rq_job_id = uuid.uuid4().hex
    now = timezone.now()
    LlmJob.objects.filter(id=job.id).update(rq_job_id=rq_job_id, enqueued_at=now)
    job.rq_job_id, job.enqueued_at = rq_job_id, now
    job_id = str(job.id)

    def push() -> None:
        queue = django_rq.get_queue(LLM_QUEUE)
        options: dict[str, Any] = {
            "job_id": rq_job_id,
            "job_timeout": settings.LLM_JOB_TIMEOUT,
            "description": f"llm job {job_id}",
        }
        if delay_seconds:
            queue.enqueue_in(timedelta(seconds=delay_seconds), TASK, job_id, **options)
        else:
            queue.enqueue(TASK, job_id, **options)

    transaction.on_commit(push)


def _check_against_price_table(*, model: str, max_tokens: int) -> None:
    price = price_for_model(model=model)
    if price is None:
        raise ValidationFailed(
            f"Model {model!r} has no price; it cannot be run.",
            code="unknown_model",
            detail={"field": "model"},
        )
    if max_tokens > price.max_output_tokens:
        raise ValidationFailed(
            f"max_tokens must be between 1 and {price.max_output_tokens} for {model}.",
            code="invalid_max_tokens",
            detail={"field": "max_tokens", "maximum": price.max_output_tokens},
        )


def job_submit(*, user: User, data: Any, idempotency_key: str | None = None) -> tuple[LlmJob, bool]:
    """Validate, insert, enqueue on commit. Returns (job, created); a repeated idempotency key
    returns the first job."""
    request = validate_job_request(data)
    _check_against_price_table(model=request.model, max_tokens=request.max_tokens)
    fingerprint = request.fingerprint()

    if idempotency_key:
        if len(idempotency_key) > 255:
            raise ValidationFailed(
                "Idempotency-Key must be at most 255 characters.", code="invalid_idempotency_key"
            )
        existing = LlmJob.objects.filter(user=user, idempotency_key=idempotency_key).first()
        if existing is not None:
            return _replay(existing, fingerprint), False

    try:
        with transaction.atomic():
            job = LlmJob.objects.create(
                user=user,
                feature=request.feature,
                model=request.model,
                messages=request.messages,
                system=request.system,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                metadata=request.metadata or {},
                idempotency_key=idempotency_key or None,
                request_fingerprint=fingerprint,
            )
            job_enqueue(job=job)
    except IntegrityError:
        # Two submits with the same key raced; the first insert won.
        if not idempotency_key:
            raise
        existing = LlmJob.objects.get(user=user, idempotency_key=idempotency_key)
        return _replay(existing, fingerprint), False
    logger.info("job %s submitted feature=%s model=%s", job.id, job.feature, job.model)
    return job, True


def _replay(job: LlmJob, fingerprint: str) -> LlmJob:
    if job.request_fingerprint != fingerprint:
        raise Conflict(
            "This Idempotency-Key was used with a different request body.",
            code="idempotency_conflict",
            detail={"job_id": str(job.id)},
        )
    return job


@transaction.atomic
def job_cancel(*, job: LlmJob) -> LlmJob:
    """Cancel a queued or retrying job. A worker that picks its RQ job up later finds it
    cancelled and never calls the provider."""
    now = timezone.now()
    updated = LlmJob.objects.filter(id=job.id, status__in=LlmJob.WAITING_STATUSES).update(
        status=LlmJob.Status.CANCELLED, completed_at=now, next_attempt_at=None
    )
    job.refresh_from_db()
    if not updated:
        raise Conflict(
            f"A {job.status} job cannot be cancelled.",
            code="not_cancellable",
            detail={"status": job.status},
        )
    logger.info("job %s cancelled", job.id)
    return job


@transaction.atomic
def job_requeue(*, job: LlmJob, model: str | None = None) -> bool:
    """Give a failed job a fresh retry budget and queue it again under the same id.

    Idempotent: only a failed job moves, so requeuing twice runs it once. Returns whether this
    call moved it.
    """
    changes: dict[str, Any] = {}
    if model is not None and model != job.model:
        _check_against_price_table(model=model, max_tokens=job.max_tokens)
        changes["model"] = model
    updated = LlmJob.objects.filter(id=job.id, status=LlmJob.Status.FAILED).update(
        status=LlmJob.Status.QUEUED,
        budget_attempts=0,
        retry_counts={},
        next_attempt_at=None,
        completed_at=None,
        error_code="",
        error_http_status=None,
        error_message="",
        error_severity="",
        **changes,
    )
    job.refresh_from_db()
    if updated:
        job_enqueue(job=job)
        logger.info("job %s requeued", job.id)
    return bool(updated)
