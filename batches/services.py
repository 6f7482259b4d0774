"""Every write on a batch: submit, stop (cancel, or the first failure without allow_failures),
finish, and the background cancel of a stopped batch's waiting jobs.

The counters move in batches/counters.py, inside the transitions of the batch's jobs; the jobs
themselves only ever change through the services of jobs/ (``jobs_submit_many``, ``job_cancel``).
"""

import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import django_rq
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone
from rq import Queue

from api.errors import Conflict
from batches.events import flush_progress, progress_on_commit, publish_finished_on_commit
from batches.models import Batch, BatchItem, BatchTag
from batches.selectors import batch_with_cost
from batches.serializers import BatchOutputSerializer
from batches.validation import (
    ITEM_FIELDS,
    MARKER_KEY,
    BatchRequest,
    batch_request_fingerprint,
    check_item_metadata,
    validate_batch_request,
    validate_embedding_items,
)
from embeddings.validation import MAX_INPUTS
from jobs.admission import (
    check_against_price_table,
    check_budgets_not_spent,
    idempotency_key_hash,
)
from jobs.bulk import NewJob, insert_rows, job_requests_validate, jobs_submit_many
from jobs.models import LlmJob
from jobs.services import CANCELLABLE_AT_ONCE, job_cancel
from jobs.validation import JobRequest, validate_feature_and_model
from llmops.queues import BATCH_CANCEL_TASK, DEFAULT_QUEUE, batch_cancel_job_id
from runtime.rq_jobs import rq_job_is_alive, rq_jobs_fetch, rq_jobs_resume
from webhooks.models import Subject
from webhooks.services import webhook_record
from webhooks.signing_secrets import signer_for

__all__ = [
    "CANCEL_CHUNK",
    "CANCEL_GRACE_SECONDS",
    "CANCEL_JOB_TIMEOUT",
    "batch_cancel",
    "batch_cancel_jobs_enqueue_on_commit",
    "batch_cancel_jobs_run",
    "batch_cancels_resume",
    "batch_finished",
    "batch_insert",
    "batch_replayed",
    "batch_submit_requests",
    "batch_stop",
    "batch_submit",
]

logger = logging.getLogger(__name__)

CANCEL_CHUNK = 200
"""Jobs read per query by the background cancel; each is then cancelled in its own transaction
(``job_cancel``), so a running job is never waited for and one refusal undoes nothing."""
CANCEL_JOB_TIMEOUT = 3600
"""Seconds the background cancel may run: 10,000 jobs at a few ms each take under a minute. One
killed on timeout is resumed by the monitor (``batch_cancels_resume``) and starts again."""
CANCEL_GRACE_SECONDS = 60.0
"""A stopped batch whose background cancel has not ended this long after the stop, and whose RQ
job is gone from Redis, lost it (flush, failover, an enqueue that failed after commit)."""


# --- Submit -------------------------------------------------------------------------------------


def batch_submit(
    *,
    user: User,
    data: Any,
    idempotency_key: str | None = None,
    api_key_id: int | None = None,
) -> tuple[Batch, bool]:
    """Validate every item as a job, then insert the batch, its jobs (identical items share one)
    and its items in one transaction; the jobs are enqueued in chunks after commit. One bad item
    refuses everything (``400 invalid_items`` with every bad index). Returns (batch, created);
    a repeated Idempotency-Key with the same body returns the first batch."""
    request = validate_batch_request(data)

    key_hash = fingerprint = None
    if idempotency_key:
        key_hash = idempotency_key_hash(idempotency_key)
        fingerprint = batch_request_fingerprint(data)
        existing = batch_replayed(user=user, key_hash=key_hash, fingerprint=fingerprint)
        if existing is not None:
            return existing, False
    if request.kind == "embedding":
        return _embedding_batch_submit(
            user=user,
            request=request,
            key_hash=key_hash,
            fingerprint=fingerprint,
            api_key_id=api_key_id,
        )

    requests = job_requests_validate(
        user=user,
        items=request.items,
        shared=request.shared(),
        item_fields=ITEM_FIELDS,
        check_item=check_item_metadata,
        api_key_id=api_key_id,
    )
    return batch_submit_requests(
        user=user,
        requests=requests,
        api_key_id=api_key_id,
        key_hash=key_hash,
        fingerprint=fingerprint,
        name=request.name,
        feature=request.feature,
        model=request.model,
        allow_failures=request.allow_failures,
        callback_url=request.callback_url,
        deadline=request.deadline,
        tags=request.tags,
    )


def batch_replayed(*, user: User, key_hash: str, fingerprint: str) -> Batch | None:
    """The batch a repeated Idempotency-Key (its hash) made, if any; 409 when that key came
    with another body (``fingerprint``)."""
    existing = Batch.objects.filter(user=user, idempotency_key_hash=key_hash).first()
    return None if existing is None else _replay(existing, fingerprint)


def batch_submit_requests(
    *,
    user: User,
    requests: list[JobRequest],
    api_key_id: int | None = None,
    key_hash: str | None = None,
    fingerprint: str | None = None,
    item_metadata: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> tuple[Batch, bool]:
    """Insert a chat batch of validated job requests in one transaction (``batch_insert``).
    Returns (batch, created): two submits with the same Idempotency-Key that raced get the
    first batch."""
    try:
        with transaction.atomic():
            batch = batch_insert(
                user=user,
                api_key_id=api_key_id,
                requests=requests,
                item_metadata=item_metadata,
                idempotency_key_hash=key_hash,
                request_fingerprint=fingerprint or "",
                **fields,
            )
    except IntegrityError:
        # Two submits with the same key raced; the first insert won.
        if not key_hash:
            raise
        existing = Batch.objects.get(user=user, idempotency_key_hash=key_hash)
        return _replay(existing, fingerprint or ""), False
    logger.info(
        "batch %s submitted: %s items, %s jobs, feature=%s model=%s",
        batch.id,
        batch.total,
        batch.jobs_total,
        batch.feature,
        batch.model,
    )
    return batch, True


def batch_insert(
    *,
    user: User,
    requests: list[JobRequest],
    api_key_id: int | None = None,
    item_metadata: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> Batch:
    """Insert a chat batch of validated job requests (``fields``: the batch's own columns), its
    jobs (identical requests share the job of the first of them), its tags and its items (each
    with its ``item_metadata``, if given). Inside the caller's transaction; the jobs are
    enqueued after commit."""
    job_of_item: list[int] = []
    firsts: dict[str, int] = {}
    unique: list[tuple[JobRequest, str]] = []
    for item_request in requests:
        item_fingerprint = item_request.fingerprint()
        position = firsts.get(item_fingerprint)
        if position is None:
            position = firsts[item_fingerprint] = len(unique)
            unique.append((item_request, item_fingerprint))
        job_of_item.append(position)
    batch = Batch.objects.create(
        user=user,
        api_key_id=api_key_id,
        total=len(requests),
        jobs_total=len(unique),
        pending=len(requests),
        **fields,
    )
    BatchTag.objects.bulk_create(BatchTag(batch=batch, tag=tag) for tag in batch.tags)
    marker = {"id": str(batch.id)}
    jobs = jobs_submit_many(
        user=user,
        api_key_id=api_key_id,
        new_jobs=[
            NewJob(
                request=replace(
                    item_request, metadata={**(item_request.metadata or {}), MARKER_KEY: marker}
                ),
                fingerprint=item_fingerprint,
            )
            for item_request, item_fingerprint in unique
        ],
    )
    seen: set[int] = set()
    items = []
    for index, position in enumerate(job_of_item):
        items.append(
            BatchItem(
                batch=batch,
                index=index,
                job_id=jobs[position].id,
                runs_job=position not in seen,
                metadata=item_metadata[index] if item_metadata else None,
            )
        )
        seen.add(position)
    insert_rows(items)
    progress_on_commit(batch)
    return batch


def _embedding_batch_submit(
    *,
    user: User,
    request: BatchRequest,
    key_hash: str | None,
    fingerprint: str | None,
    api_key_id: int | None,
) -> tuple[Batch, bool]:
    """A batch of texts to embed: identical texts are embedded once, and the distinct ones are
    grouped, in order, into embedding jobs of ``LLM_EMBEDDING_GROUP_SIZE`` texts (each a
    provider request, its attempts booked like any job's). Each item points at its job and at
    its text's ``position`` in that job's input; its metadata stays on the item."""
    feature, model = validate_feature_and_model(request.shared())
    texts = validate_embedding_items(request.items)
    check_against_price_table(model=model, max_tokens=0, kind=LlmJob.Kind.EMBEDDING)
    check_budgets_not_spent(feature=feature, user=user, api_key_id=api_key_id)
    size = min(settings.LLM_EMBEDDING_GROUP_SIZE, MAX_INPUTS)
    distinct: dict[str, int] = {}
    for text, _metadata in texts:
        distinct.setdefault(text, len(distinct))
    unique = list(distinct)
    groups = [unique[start : start + size] for start in range(0, len(unique), size)]
    params = {"dimensions": request.dimensions} if request.dimensions is not None else None
    try:
        with transaction.atomic():
            batch = Batch.objects.create(
                user=user,
                api_key_id=api_key_id,
                name=request.name,
                kind=LlmJob.Kind.EMBEDDING,
                feature=feature,
                model=model,
                allow_failures=request.allow_failures,
                callback_url=request.callback_url,
                total=len(texts),
                jobs_total=len(groups),
                pending=len(texts),
                idempotency_key_hash=key_hash,
                request_fingerprint=fingerprint or "",
                deadline=request.deadline,
                tags=request.tags,
            )
            BatchTag.objects.bulk_create(BatchTag(batch=batch, tag=tag) for tag in request.tags)
            marker = {"id": str(batch.id)}
            new_jobs = []
            for group in groups:
                job_request = JobRequest(
                    feature=feature,
                    model=model,
                    messages=[],
                    max_tokens=0,
                    metadata={MARKER_KEY: marker},
                    params=params,
                    kind=LlmJob.Kind.EMBEDDING,
                    input=group,
                    deadline=request.deadline,
                    tags=request.tags or None,
                )
                new_jobs.append(NewJob(request=job_request, fingerprint=job_request.fingerprint()))
            jobs = jobs_submit_many(user=user, api_key_id=api_key_id, new_jobs=new_jobs)
            seen: set[int] = set()
            items = []
            for index, (text, metadata) in enumerate(texts):
                group_index, position = divmod(distinct[text], size)
                items.append(
                    BatchItem(
                        batch=batch,
                        index=index,
                        job_id=jobs[group_index].id,
                        runs_job=group_index not in seen,
                        position=position,
                        metadata=metadata,
                    )
                )
                seen.add(group_index)
            insert_rows(items)
            progress_on_commit(batch)
    except IntegrityError:
        if not key_hash:
            raise
        existing = Batch.objects.get(user=user, idempotency_key_hash=key_hash)
        return _replay(existing, fingerprint or ""), False
    logger.info(
        "embedding batch %s submitted: %s items, %s distinct texts in %s jobs, feature=%s model=%s",
        batch.id,
        batch.total,
        len(unique),
        batch.jobs_total,
        feature,
        model,
    )
    return batch, True


def _replay(batch: Batch, fingerprint: str) -> Batch:
    if batch.request_fingerprint != fingerprint:
        raise Conflict(
            "This Idempotency-Key was used with a different request body.",
            code="idempotency_conflict",
            detail={"batch_id": str(batch.id)},
        )
    return batch


# --- Stop, finish -------------------------------------------------------------------------------


@transaction.atomic
def batch_cancel(*, batch: Batch) -> Batch:
    """Stop a running batch: ``cancelled`` at once, its waiting jobs cancelled in the background
    (jobs already running end on their own). Cancelling a stopped batch again changes nothing;
    a finished one cannot be cancelled (409)."""
    if not batch_stop(batch=batch, status=Batch.Status.CANCELLED, reason="cancel requested"):
        current = Batch.objects.get(id=batch.id)
        if current.finished_at is not None:
            raise Conflict(
                f"A finished batch ({current.status}) cannot be cancelled.",
                code="not_cancellable",
                detail={"status": current.status},
            )
    return batch_with_cost(batch_id=batch.id)


def batch_stop(*, batch: Batch, status: str, reason: str) -> bool:
    """running -> cancelled | failed, once: record it and cancel the batch's waiting jobs in the
    background after commit. Returns False when the batch was already stopped or finished.
    Inside a transaction (the cancel request's, or the failed job's)."""
    now = timezone.now()
    stopped = Batch.objects.filter(
        id=batch.id, status=Batch.Status.RUNNING, finished_at__isnull=True
    ).update(status=status, cancel_requested_at=now)
    if not stopped:
        return False
    batch.status, batch.cancel_requested_at = status, now
    batch_cancel_jobs_enqueue_on_commit(batch_id=batch.id)
    batch_id = batch.id
    transaction.on_commit(lambda: logger.info("batch %s %s: %s", batch_id, status, reason))
    return True


def batch_finished(*, batch_id: UUID) -> None:
    """What happens once when a batch finishes, in the transaction that finished it
    (batches/counters.py): its callback is recorded, and ``batch.finished`` goes out after
    commit."""
    batch = batch_with_cost(batch_id=batch_id)
    representation = dict(BatchOutputSerializer(batch).data)
    if batch.callback_url:
        # Recorded exactly once: only the transaction that finished the batch gets here.
        webhook_record(
            subject_kind=Subject.BATCH,
            subject_id=batch.id,
            event="batch.finished",
            url=batch.callback_url,
            signer=signer_for(api_key_id=batch.api_key_id, feature=batch.feature),
            payload={"type": "batch.finished", "batch": representation},
        )
    publish_finished_on_commit(batch, representation)
    summary = (
        f"batch {batch.id} finished: {batch.status}, {batch.completed} completed, "
        f"{batch.failed} failed, {batch.cancelled} cancelled of {batch.total} items"
    )
    transaction.on_commit(lambda: logger.info(summary))


# --- Cancelling a stopped batch's waiting jobs, in the background -------------------------------


def batch_cancel_jobs_enqueue_on_commit(*, batch_id: UUID, if_idle: bool = False) -> None:
    """Queue the background cancel of the batch's waiting jobs once the transaction commits.
    ``if_idle``: only if its RQ job is not already waiting or running."""

    def enqueue() -> None:
        queue = django_rq.get_queue(DEFAULT_QUEUE)
        rq_job_id = batch_cancel_job_id(batch_id)
        if if_idle and rq_job_is_alive(rq_jobs_fetch(queue=queue, job_ids=[rq_job_id])[0]):
            return
        _cancel_jobs_enqueue(queue, batch_id)

    # robust: a Redis error must not fail the transition or the request; the monitor's
    # batch_cancels_resume enqueues it again.
    transaction.on_commit(enqueue, robust=True)


def _cancel_jobs_enqueue(queue: Queue, batch_id: UUID) -> None:
    queue.enqueue(
        BATCH_CANCEL_TASK,
        str(batch_id),
        job_id=batch_cancel_job_id(batch_id),
        job_timeout=CANCEL_JOB_TIMEOUT,
        description=f"cancel the waiting jobs of batch {batch_id}",
    )


def batch_cancel_jobs_run(*, batch_id: UUID) -> str:
    """Cancel every waiting job of a stopped batch through ``job_cancel``, in the order of the
    items, ``CANCEL_CHUNK`` jobs per query; a job that started meanwhile ends on its own.
    Safe to run twice: a cancelled job is not waiting any more. Returns a summary."""
    batch = Batch.objects.filter(id=batch_id).only("id", "cancel_requested_at").first()
    if batch is None or batch.cancel_requested_at is None:
        return f"batch {batch_id}: not stopped, nothing to cancel"
    cancelled = started = 0
    after = -1
    while True:
        rows = list(
            BatchItem.objects.filter(
                batch_id=batch_id,
                runs_job=True,
                index__gt=after,
                # Waiting, or waiting in a provider batch (a deferred job): CANCELLABLE_AT_ONCE
                # picks those among them.
                job__status__in=(*LlmJob.WAITING_STATUSES, LlmJob.Status.RUNNING),
            )
            .order_by("index")
            .values_list("index", "job_id")[:CANCEL_CHUNK]
        )
        if not rows:
            break
        after = rows[-1][0]
        chunk = [job_id for _, job_id in rows]
        for job in LlmJob.objects.filter(CANCELLABLE_AT_ONCE, id__in=chunk):
            try:
                job_cancel(job=job)
                cancelled += 1
            except Conflict:
                started += 1
    Batch.objects.filter(id=batch_id).update(jobs_cancelled_at=timezone.now())
    flush_progress(batch_id)
    summary = f"batch {batch_id}: {cancelled} waiting jobs cancelled, {started} had started"
    logger.info(summary)
    return summary


def batch_cancels_resume(*, grace_seconds: float = CANCEL_GRACE_SECONDS) -> int:
    """Enqueue again the background cancel of stopped, unfinished batches whose RQ job is gone
    from Redis or died before it ended (a monitor pass). Returns how many."""
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    ids = list(
        Batch.objects.filter(
            jobs_cancelled_at__isnull=True,
            cancel_requested_at__lt=cutoff,
            finished_at__isnull=True,
        )
        .order_by("cancel_requested_at")
        .values_list("id", flat=True)[:500]
    )
    if not ids:
        return 0
    queue = django_rq.get_queue(DEFAULT_QUEUE)
    resumed = rq_jobs_resume(
        queue=queue,
        ids=ids,
        job_id_for=batch_cancel_job_id,
        enqueue=lambda batch_id: _cancel_jobs_enqueue(queue, batch_id),
    )
    if resumed:
        logger.warning("re-enqueued the cancel of %s batch(es) whose RQ job was lost", resumed)
    return resumed
