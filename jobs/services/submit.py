"""submit -> queued, and putting a waiting job on the queue (again).

Part of the job services (jobs/services/__init__.py has the transition table)."""

import hashlib
import logging
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from api.errors import Conflict
from jobs import message_refs
from jobs.admission import (
    check_against_price_table,
    check_budgets_not_spent,
    idempotency_key_hash,
    policy_defaults,
)
from jobs.deadlines import deadline_is_near
from jobs.models import JobTag, LlmJob
from jobs.priorities import NORMAL, rq_job_id_for
from jobs.tags import job_tag_rows
from jobs.timeouts import job_timeout_for
from jobs.transitions import Transition, transition_committed
from jobs.validation import JobRequest, validate_job_request
from ledger.services import job_upper_bound_cost
from llmops.queues import LLM_QUEUE, RUN_LLM_JOB_TASK
from runtime.redis_clients import queue as rq_queue
from tracing.context import new_trace_fields
from webhooks.models import JOB_MARKER_KEY, Subject
from webhooks.services import webhook_subscribe
from webhooks.signing_secrets import signer_for
from webhooks.validation import validate_callback_url

logger = logging.getLogger(__name__)


# --- Enqueueing ---------------------------------------------------------------------------------


def job_enqueue(*, job: LlmJob, delay_seconds: float | None = None) -> None:
    """Point the row at a fresh RQ job id and push that RQ job once the transaction commits, so
    a worker never sees a job the database does not have yet.

    Redis being down never fails the caller: the row is committed, its RQ job is missing, and
    the reconciler enqueues it again once Redis answers (the database is the source of truth).

    The RQ job id says the job's priority, and the push puts it in its lane (jobs/priorities.py:
    high ahead of normal ahead of low, when it is due for a delayed one): an interactive job
    must not wait behind a batch of thousands. A job whose deadline is near when it becomes
    due goes to the very front (jobs/deadlines.py).
    """
    rq_job_id = rq_job_id_for(job.priority)
    now = timezone.now()
    LlmJob.objects.filter(id=job.id).update(rq_job_id=rq_job_id, enqueued_at=now)
    job.rq_job_id, job.enqueued_at = rq_job_id, now
    _push_on_commit(job, delay_seconds=delay_seconds)


def job_rq_options(job: LlmJob, *, delay_seconds: float | None = None) -> dict[str, Any]:
    """How a job goes on the llm queue (``Queue.enqueue`` options): under the RQ job id its row
    points at, with an RQ timeout scaled from its ``max_tokens``, at the front for a deadline at
    most ``LLM_DEADLINE_FRONT_SECONDS`` after it becomes due (after
    ``delay_seconds``). Also used by the bulk submit (jobs/bulk.py)."""
    return {
        "job_id": job.rq_job_id,
        "job_timeout": job_timeout_for(job.max_tokens),
        "description": f"llm job {job.id}",
        # A high job's place is the llm queue's own (runtime/queue_order.py: behind the high
        # jobs already waiting); the very front is for a job whose deadline is near.
        "at_front": deadline_is_near(job.deadline, delay_seconds=delay_seconds),
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


# --- Submit -------------------------------------------------------------------------------------


def job_submit(
    *,
    user: User,
    data: Any = None,
    idempotency_key: str | None = None,
    messages_ref: dict[str, Any] | None = None,
    api_key_id: int | None = None,
    request: JobRequest | None = None,
    max_cost_usd: Decimal | None = None,
    callback_url: str | None = None,
) -> tuple[LlmJob, bool]:
    """Validate, insert, enqueue on commit. Returns (job, created); a repeated idempotency key
    returns the first job. Keys compare byte for byte: ``Key-A`` and ``key-a`` are two keys.

    ``messages_ref`` (jobs/message_refs.py ``make_ref`` of ``data["messages"]``): the job stores
    the reference instead of its messages, which are validated here all the same.
    ``api_key_id``: the API key that submits it (recorded on the job and its ledger rows, and
    its budget applies). ``request``: a body validated already, instead of ``data`` (an
    embeddings submit, embeddings/validation.py). ``max_cost_usd``: the most the job may cost
    in all (an agent run's turn carries what its run has left). ``callback_url`` (or the
    body's): each final state of the job is POSTed there, signed (webhooks/); the same for a
    front door's ``LLM-Callback-URL``."""
    if request is None:
        if isinstance(data, dict) and "callback_url" in data:
            data = dict(data)
            given = data.pop("callback_url")
            callback_url = given if callback_url is None else callback_url
        request = validate_job_request(data)
    callback = validate_callback_url(callback_url)
    price = check_against_price_table(
        model=request.model, max_tokens=request.max_tokens, kind=request.kind
    )
    fingerprint = request.fingerprint()
    if callback:
        # A repeated Idempotency-Key with another callback URL is another request.
        fingerprint = hashlib.sha256(f"{fingerprint}\x00{callback}".encode()).hexdigest()
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
            job.max_cost_usd = max_cost_usd
            if callback:
                job.metadata = {**job.metadata, JOB_MARKER_KEY: True}
            if messages_ref is not None:
                if messages_ref.get("sha256") != message_refs.digest(request.messages):
                    raise message_refs.MessagesRefError("messages_ref was made from other messages")
                job.messages, job.messages_ref = [], messages_ref
                job._resolved_messages = request.messages  # type: ignore[attr-defined]
            # Every budget of its feature, user and key must be able to take one attempt's
            # worst case (429 otherwise, nothing written): not a 202 that fails at the worker.
            check_budgets_not_spent(
                feature=job.feature,
                user=user,
                api_key_id=api_key_id,
                worst_case_usd=job_upper_bound_cost(job=job, price=price),
            )
            job.save(force_insert=True)
            JobTag.objects.bulk_create(job_tag_rows([job]))
            if callback:
                webhook_subscribe(
                    subject_kind=Subject.JOB,
                    subject_id=job.id,
                    url=callback,
                    signer=signer_for(api_key_id=api_key_id, feature=job.feature),
                )
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
    priority = request.priority or NORMAL
    return LlmJob(
        rq_job_id=rq_job_id_for(priority),
        priority=priority,
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
        # The caller's trace (the request's traceparent, or an agent run's) is continued.
        **new_trace_fields(),
    )


def _replay(job: LlmJob, fingerprint: str) -> LlmJob:
    if job.request_fingerprint != fingerprint:
        raise Conflict(
            "This Idempotency-Key was used with a different request body.",
            code="idempotency_conflict",
            detail={"job_id": str(job.id)},
        )
    return job
