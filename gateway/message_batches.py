"""The Anthropic door's Message Batches (docs/front-doors.md#message-batches): a batch of
Messages requests is a batch of batches/ (its items, counters, cancel and callback) whose jobs
are deferred jobs (deferred/): each runs through the provider's batch API at the batch price
where the provider has one, with the ledger, budgets, the limiter and the deadline fallback of
any deferred job. Sync: the door's views run these on the doors' threads."""

import re
from typing import Any, cast
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import Q

from api.errors import Conflict, ValidationFailed
from batches.models import Batch, BatchItem
from batches.services import batch_cancel, batch_replayed, batch_submit_requests
from batches.validation import batch_request_fingerprint, check_item_metadata
from gateway import message_batch_shapes as shapes
from gateway.anthropic_shapes import PASSED, job_data
from gateway.errors import GatewayError
from gateway.headers import CallOptions
from jobs.admission import idempotency_key_hash
from jobs.bulk import job_requests_validate
from jobs.deadlines import validate_deadline
from jobs.models import LlmJob
from keys.models import ApiKey

__all__ = [
    "DOOR",
    "EXPIRES_SECONDS",
    "MAX_REQUESTS",
    "RESULTS_CHUNK",
    "message_batch_cancel",
    "message_batch_counts",
    "message_batch_create",
    "message_batch_delete",
    "message_batch_get",
    "message_batch_results_chunk",
    "message_batches_page",
]

DOOR = "anthropic"
"""``Batch.door`` of the batches made here: only those are this API's."""
MAX_REQUESTS = 100_000
"""The API's bound on the requests of one batch (the door's body limit comes first:
``LLM_MAX_REQUEST_BYTES``)."""
EXPIRES_SECONDS = 86_400
"""A batch expires 24 hours after its creation, as on the API: it is its jobs' deadline (a
deferred job nearing it runs in real time; one not started by then ends ``expired``).
``LLM-Deadline-Seconds`` sets another."""
RESULTS_CHUNK = 500
"""Items read per query while the results stream."""
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_REQUEST_FIELDS = {"custom_id", "params"}
_ITEM_FIELDS = frozenset({*PASSED, "feature", "mode"})
"""What a request's params give its job (``job_data``); the batch gives the rest."""


def _invalid(where: str, message: str, code: str = "invalid_request") -> GatewayError:
    return GatewayError(400, f"{where}: {message}", code=code, param=where)


def _requests_of(body: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """The custom ids and job bodies of a create body, checked as the API checks them."""
    if not isinstance(body, dict):
        raise GatewayError(400, "The body must be a JSON object.", code="invalid_body")
    unknown = sorted(set(body) - {"requests"})
    if unknown:
        raise _invalid(unknown[0], "Extra inputs are not permitted.", "unknown_field")
    entries = body.get("requests")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_REQUESTS:
        raise _invalid("requests", f"must be a list of 1 to {MAX_REQUESTS:,} requests.")
    custom_ids: list[str] = []
    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"requests.{index}"
        if not isinstance(entry, dict) or set(entry) != _REQUEST_FIELDS:
            raise _invalid(where, "a request is an object of custom_id and params.")
        custom_id, params = entry["custom_id"], entry["params"]
        if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
            raise _invalid(f"{where}.custom_id", "must be 1 to 64 letters, digits, - or _.")
        if custom_id in seen:
            raise _invalid(
                f"{where}.custom_id", f"{custom_id!r} is not unique within the batch.", "duplicate"
            )
        seen.add(custom_id)
        if isinstance(params, dict) and params.get("stream"):
            raise _invalid(f"{where}.params.stream", "a request of a batch cannot stream.")
        try:
            items.append(job_data(params, CallOptions()))
        except GatewayError as error:
            raise _invalid(f"{where}.params", error.message, error.code) from None
        custom_ids.append(custom_id)
    return custom_ids, items


def message_batch_create(*, key: ApiKey, body: Any, options: CallOptions) -> Batch:
    """A batch of deferred jobs, one per request, of ``key``'s user, with the call's feature,
    tags, deadline (else 24 hours) and callback. Each request is validated as the Messages door
    validates a call and priced; the feature's budgets are checked. One bad request refuses
    the whole batch (400 naming it, nothing saved): a model without a price cannot be a job.
    A repeated ``Idempotency-Key`` returns the first batch."""
    user = cast(User, key.user)
    key_hash = fingerprint = None
    if options.idempotency_key:
        key_hash = idempotency_key_hash(options.idempotency_key)
        fingerprint = batch_request_fingerprint({"body": body, **options.job_fields()})
        existing = batch_replayed(user=user, key_hash=key_hash, fingerprint=fingerprint)
        if existing is not None:
            return existing
    custom_ids, items = _requests_of(body)
    deadline, _form = validate_deadline(
        {"deadline_seconds": options.deadline_seconds or EXPIRES_SECONDS}
    )
    assert deadline is not None
    shared = {**options.job_fields(), "mode": LlmJob.Mode.DEFERRED.value}
    shared.pop("deadline_seconds", None)
    shared["deadline"] = deadline.isoformat()
    try:
        requests = job_requests_validate(
            user=user,
            items=items,
            shared=shared,
            item_fields=_ITEM_FIELDS,
            check_item=check_item_metadata,
            api_key_id=key.id,
        )
    except ValidationFailed as exc:
        errors = exc.detail.get("errors") if isinstance(exc.detail, dict) else None
        if exc.code != "invalid_items" or not errors:
            raise
        first = errors[0]
        field = f".{first['field']}" if first.get("field") else ""
        raise _invalid(
            f"requests.{first['index']}.params{field}",
            f"{first['message']} (custom_id {custom_ids[first['index']]!r}; "
            f"{len(exc.detail['indexes'])} invalid request(s), nothing was saved)",
            first["code"],
        ) from None
    models = ", ".join(sorted({request.model for request in requests}))
    batch, _created = batch_submit_requests(
        user=user,
        requests=requests,
        api_key_id=key.id,
        key_hash=key_hash,
        fingerprint=fingerprint,
        item_metadata=[{"custom_id": custom_id} for custom_id in custom_ids],
        door=DOOR,
        feature=requests[0].feature,
        model=models[:100],
        callback_url=options.callback_url or "",
        deadline=deadline,
        tags=options.tags or [],
    )
    return batch


def message_batch_get(*, user: User, batch_id: str) -> Batch:
    """A batch of ``user``'s made at this door; 404 for anyone else's."""
    uuid = shapes.batch_uuid(batch_id)
    batch = None
    if uuid is not None:
        batch = Batch.objects.filter(id=uuid, user=user, door=DOOR).first()
    if batch is None:
        raise GatewayError(404, f"No message batch {batch_id!r}.", param="message_batch_id")
    return batch


def message_batch_counts(batch: Batch) -> dict[str, int]:
    """``request_counts`` as the API keeps them: every request ``processing`` until the whole
    batch ended, then how each ended (its item counters; the expired ones counted apart)."""
    if batch.finished_at is None:
        return {"processing": batch.total, "succeeded": 0, "errored": 0, "canceled": 0,
                "expired": 0}  # fmt: skip
    expired = BatchItem.objects.filter(
        batch=batch, job__status=LlmJob.Status.FAILED, job__error_code=shapes.EXPIRED_REASON
    ).count()
    return {
        "processing": max(batch.pending, 0),
        "succeeded": batch.completed,
        "errored": batch.failed - expired,
        "canceled": batch.cancelled,
        "expired": expired,
    }


def message_batches_page(
    *, user: User, limit: int, after_id: str | None, before_id: str | None
) -> tuple[list[Batch], bool]:
    """A page of ``user``'s batches, newest first, as the API pages (``after_id``: the older
    ones after it; ``before_id``: the newer ones before it), and whether there are more."""
    batches = Batch.objects.filter(user=user, door=DOOR)
    if before_id:
        cursor = message_batch_get(user=user, batch_id=before_id)
        newer = Q(created_at__gt=cursor.created_at) | Q(
            created_at=cursor.created_at, id__gt=cursor.id
        )
        page = list(batches.filter(newer).order_by("created_at", "id")[: limit + 1])
        return list(reversed(page[:limit])), len(page) > limit
    if after_id:
        cursor = message_batch_get(user=user, batch_id=after_id)
        batches = batches.filter(
            Q(created_at__lt=cursor.created_at) | Q(created_at=cursor.created_at, id__lt=cursor.id)
        )
    page = list(batches.order_by("-created_at", "-id")[: limit + 1])
    return page[:limit], len(page) > limit


def message_batch_results_chunk(*, batch_id: UUID, after_index: int) -> list[tuple[int, bytes]]:
    """The next ``RESULTS_CHUNK`` lines of a batch's results, in request order, each with its
    item's index."""
    items = (
        BatchItem.objects.filter(batch_id=batch_id, index__gt=after_index)
        .select_related("job")
        .defer("job__messages", "job__system", "job__input")
        .order_by("index")[:RESULTS_CHUNK]
    )
    return [
        (item.index, shapes.result_line(str((item.metadata or {}).get("custom_id", "")), item.job))
        for item in items
    ]


def message_batch_cancel(*, user: User, batch_id: str) -> Batch:
    """Cancel a batch: ``canceling`` at once, then each request not yet answered is cancelled
    in the background (a deferred job waiting in a provider batch too; its result, if it comes,
    is booked superseded), and the batch ends. An ended batch is returned as it is."""
    batch = message_batch_get(user=user, batch_id=batch_id)
    if batch.finished_at is None:
        try:
            batch_cancel(batch=batch)
        except Conflict:
            pass  # it ended meanwhile
    return message_batch_get(user=user, batch_id=batch_id)


def message_batch_delete(*, user: User, batch_id: str) -> None:
    """Delete an ended batch (its jobs stay in the job API and the ledger); 400 before."""
    batch = message_batch_get(user=user, batch_id=batch_id)
    if batch.finished_at is None:
        raise GatewayError(
            400,
            f"Message batch {batch_id} has not ended: cancel it, then delete it once ended.",
            code="not_ended",
        )
    batch.delete()
