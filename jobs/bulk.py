"""Many jobs submitted at once (a batch's items): validated with the rules of one job, inserted in
bulk, counted in bulk, pushed onto the llm queue in chunks once the transaction commits.

``job_submit`` (jobs/services/) costs a handful of statements and Redis round trips per job;
ten thousand of those would keep a request busy for a minute. Here the rules stay the ones of
one job (``validate_job_request``, ``check_against_price_table``, ``check_budgets_not_spent``:
called, never copied), the rows are those ``job_build`` makes, and their RQ jobs carry the
options ``job_rq_options`` gives one job; only the writes are grouped:

- rows: ``insert_rows``, a multi-row INSERT of each field's own database value (the
  ``pre_save`` and ``get_db_prep_save`` that ``bulk_create`` calls), without the SQL compiler's
  per-value work: for the 40 columns of a job that work was two thirds of ``bulk_create``'s
  time. The driver splits the statement (MySQLdb: 512 KB each, far below MariaDB's 16 MiB
  ``max_allowed_packet``);
- the SUBMITTED transition: ``transitions_committed`` (one counter statement per label set, one
  log line per 200 jobs, no per-job live event);
- RQ: ``Queue.enqueue_many`` on one Redis pipeline per ``ENQUEUE_CHUNK`` jobs, after commit. If
  Redis refuses, the rows stay ``queued`` and the reconciler enqueues them (as for one job).
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Model
from django.db.models.fields import AutoFieldMixin
from django_rq.queues import get_result_ttl
from redis.exceptions import RedisError
from rq import Queue

from api.errors import ApplicationError, ValidationFailed
from jobs.admission import check_against_price_table, check_budgets_not_spent, policy_defaults
from jobs.models import LlmJob
from jobs.services import job_build, job_rq_options
from jobs.tags import job_tag_rows
from jobs.transitions import Transition, transitions_committed
from jobs.validation import JobRequest, validate_job_request
from llmops.queues import LLM_QUEUE, RUN_LLM_JOB_TASK
from runtime.redis_clients import queue as rq_queue

__all__ = [
    "ENQUEUE_CHUNK",
    "ERRORS_SHOWN",
    "INSERT_ROWS",
    "NewJob",
    "insert_rows",
    "job_requests_validate",
    "jobs_submit_many",
]

logger = logging.getLogger(__name__)

INSERT_ROWS = 1000
"""Rows whose database values are prepared at once (memory), then inserted by the driver."""
ENQUEUE_CHUNK = 500
"""RQ jobs per Redis pipeline: 10,000 jobs in 20 round trips, none of them a large one."""
ERRORS_SHOWN = 100
"""Bad items described one by one in a refusal; every bad index is listed whatever their number."""


@dataclass(frozen=True)
class NewJob:
    """A validated job to insert: its request as run, and the fingerprint of the request as
    the client sent it (``LlmJob.request_fingerprint``)."""

    request: JobRequest
    fingerprint: str


def job_requests_validate(
    *,
    user: User,
    items: Sequence[Any],
    shared: dict[str, Any],
    item_fields: frozenset[str],
    check_item: Callable[[JobRequest], None] | None = None,
    api_key_id: int | None = None,
) -> list[JobRequest]:
    """Validate every item as a job body made of the item's fields and the ``shared`` ones
    (``feature``, ``model``). Refuses everything with one ``400 invalid_items`` naming the index
    of each bad item; a mistake in a shared field (an unknown model, a bad feature) is the
    mistake of all of them and is raised as it is. The budgets are checked once (429).

    ``item_fields``: what an item may carry. ``check_item``: the caller's own rule for an item
    (it raises ``ValidationFailed``).
    """
    requests: list[JobRequest] = []
    errors: list[dict[str, Any]] = []
    bad: list[int] = []
    price_checked: dict[tuple[str, int], ApplicationError | None] = {}
    for index, item in enumerate(items):
        try:
            request = _validate_item(
                item, shared=shared, item_fields=item_fields, price_checked=price_checked
            )
            if check_item is not None:
                check_item(request)
        except ApplicationError as exc:
            field = exc.detail.get("field") if isinstance(exc.detail, dict) else None
            if field in shared:
                raise
            bad.append(index)
            if len(errors) < ERRORS_SHOWN:
                errors.append(
                    {"index": index, "code": exc.code, "message": exc.message, "field": field}
                )
            continue
        requests.append(request)
    if bad:
        raise ValidationFailed(
            f"{len(bad)} of {len(items)} items are invalid; nothing was saved.",
            code="invalid_items",
            detail={"indexes": bad, "errors": errors, "errors_truncated": len(bad) > len(errors)},
        )
    if requests:
        check_budgets_not_spent(feature=requests[0].feature, user=user, api_key_id=api_key_id)
    return requests


def _validate_item(
    item: Any,
    *,
    shared: dict[str, Any],
    item_fields: frozenset[str],
    price_checked: dict[tuple[str, int], ApplicationError | None],
) -> JobRequest:
    if not isinstance(item, dict):
        raise ValidationFailed("An item must be a JSON object.", code="invalid_body")
    unknown = sorted(set(item) - item_fields)
    if unknown:
        raise ValidationFailed(
            f"Unknown item fields: {', '.join(unknown)}.",
            code="unknown_field",
            # No "field": an item's own mistake, even when it names a field of the batch.
            detail={"fields": unknown},
        )
    request = validate_job_request({**item, **shared})
    # One price lookup per distinct model and max_tokens, not one per item: the answer is the
    # same (the items of a Message Batch each name their own model).
    checked = (request.model, request.max_tokens)
    if checked not in price_checked:
        try:
            check_against_price_table(model=request.model, max_tokens=request.max_tokens)
            price_checked[checked] = None
        except ApplicationError as exc:
            price_checked[checked] = exc
    refusal = price_checked[checked]
    if refusal is not None:
        raise refusal
    return request


def jobs_submit_many(
    *, user: User, new_jobs: Sequence[NewJob], api_key_id: int | None = None
) -> list[LlmJob]:
    """Insert validated jobs, count and announce them (SUBMITTED), and push their RQ jobs in
    chunks once the caller's transaction commits. Call inside that transaction."""
    policies: dict[Any, Any] = {}  # one feature-policy read per feature, not one per job
    jobs = [
        job_build(
            user=user,
            request=policy_defaults(new.request, memo=policies),
            fingerprint=new.fingerprint,
            api_key_id=api_key_id,
        )
        for new in new_jobs
    ]
    insert_rows(jobs)
    insert_rows(job_tag_rows(jobs))
    transitions_committed(jobs, Transition.SUBMITTED)
    _push_many_on_commit(jobs)
    return jobs


def insert_rows(rows: Sequence[Model]) -> None:
    """INSERT new rows of one model as ``bulk_create`` would, faster: each field's ``pre_save``
    (``auto_now_add``) and ``get_db_prep_save`` (JSON, UUID, datetime, Decimal to the database's
    form), then one parameterised multi-row INSERT per ``INSERT_ROWS``. Their primary keys must
    be set already (a UUID's default), or be auto-increment (then left unknown). No signals."""
    if not rows:
        return
    model = type(rows[0])
    fields = [
        field
        for field in model._meta.concrete_fields
        if not (field.primary_key and isinstance(field, AutoFieldMixin))
    ]
    ops = connection.ops
    columns = ", ".join(ops.quote_name(field.column) for field in fields)
    sql = (
        f"INSERT INTO {ops.quote_name(model._meta.db_table)} ({columns}) "
        f"VALUES ({', '.join(['%s'] * len(fields))})"
    )
    with connection.cursor() as cursor:
        for start in range(0, len(rows), INSERT_ROWS):
            chunk = rows[start : start + INSERT_ROWS]
            cursor.executemany(
                sql,
                [
                    [
                        field.get_db_prep_save(field.pre_save(row, True), connection)
                        for field in fields
                    ]
                    for row in chunk
                ],
            )
            for row in chunk:
                row._state.adding = False
                row._state.db = connection.alias


def _push_many_on_commit(jobs: list[LlmJob]) -> None:
    """``_push_on_commit`` of jobs/services/ for many jobs: the same RQ job ids and options,
    one Redis pipeline per chunk."""
    # A deferred job waits for the deferred loop (deferred/services.py), never for the queue.
    pushes = [
        (str(job.id), job_rq_options(job)) for job in jobs if job.mode != LlmJob.Mode.DEFERRED
    ]
    if not pushes:
        return

    def push() -> None:
        queue = rq_queue(LLM_QUEUE)
        result_ttl = get_result_ttl(LLM_QUEUE)
        for start in range(0, len(pushes), ENQUEUE_CHUNK):
            datas = [
                Queue.prepare_data(
                    RUN_LLM_JOB_TASK,
                    args=(job_id,),
                    timeout=options["job_timeout"],
                    result_ttl=result_ttl,
                    description=options["description"],
                    job_id=options["job_id"],
                    at_front=options["at_front"],
                )
                for job_id, options in pushes[start : start + ENQUEUE_CHUNK]
            ]
            try:
                with queue.connection.pipeline() as pipeline:
                    queue.enqueue_many(datas, pipeline=pipeline)
                    pipeline.execute()
            except RedisError as exc:
                # The rest would fail the same way; the reconciler enqueues every one of them.
                logger.warning(
                    "%s of %s jobs not enqueued: Redis refused (%s); the reconciler will "
                    "enqueue them",
                    len(pushes) - start,
                    len(pushes),
                    type(exc).__name__,
                )
                return

    transaction.on_commit(push)
