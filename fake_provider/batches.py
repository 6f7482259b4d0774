"""The fake provider's Message Batches API (``/v1/messages/batches``), as Anthropic serves it.

    POST   /v1/messages/batches               create: {"requests": [{"custom_id", "params"}]}
    GET    /v1/messages/batches               list, newest first (limit, before_id, after_id)
    GET    /v1/messages/batches/{id}          the batch: processing_status, request_counts
    POST   /v1/messages/batches/{id}/cancel   cancel: canceling, then ended
    GET    /v1/messages/batches/{id}/results  the results, one JSON line per request (ended only)
    DELETE /v1/messages/batches/{id}          delete an ended batch

A create is validated as the API does: 1 to 100,000 requests (256 MB: app.py reads the body),
each ``custom_id`` unique and matching ``^[a-zA-Z0-9_-]{1,64}$``, each ``params`` a Messages body
(responses.py ``parse_request``; ``stream`` must be false); any fault answers 400 and creates
nothing. A model the fake does not know is no create error: that item ends ``errored`` with a
``not_found_error``, as on the API.

Processing: each batch takes the ``batch_processing_seconds`` configured when it was created
(``POST /_fake/faults``, default 1 s); its items end one by one at evenly spread moments over
that time, in a shuffled order (results come out of request order, as the API warns). Shares
``batch_errored_rate`` (an ``api_error`` or ``overloaded_error``) and ``batch_expired_rate`` (at
the end of processing, as items the API did not reach in 24 hours) are drawn per item. Nothing
runs in the background: an item whose moment has come is ended when anything reads the batches
(these routes, ``/_fake/stats``, ``/_fake/billing``), so reading never awaits. The counts move
from ``processing`` to the outcomes as items end (the API reference says they may stay 0 until
the whole batch ends: a client should read them only once ``processing_status`` is ``ended``).
A cancel turns the items still processing into ``canceled``: the answer says ``canceling``, the
next read ``ended``. Past ``MAX_BATCHES_KEPT`` batches the oldest ended ones are forgotten.

Billing: a succeeded item is billed when it ends, for the message ``build_message`` gives (the
same as ``POST /v1/messages`` would), at half the standard price (a web search keeps its fee).
It counts in ``/_fake/stats`` ``billed`` (tokens and ``cost_usd``), also under
``billed.batch_cost_usd``, and in ``/_fake/billing`` with ``how`` ``batch``, its ``batch_id`` and
``custom_id``. Errored, expired and canceled items bill nothing. Batch routes do not count in
``requests``/``by_status`` (those are ``POST /v1/messages``'); ``batch_requests`` counts the
items of the batches created and ``batch_results`` how they ended.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs

from .responses import (
    ApiError,
    MessagesRequest,
    build_message,
    error_body,
    new_request_id,
    parse_request,
    should_retry,
)
from .state import FakeProviderState, Price

__all__ = [
    "BATCHES_PATH",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_REQUESTS",
    "RESULTS_CONTENT_TYPE",
    "Answer",
    "Batch",
    "advance_batches",
    "batch_price",
    "handle",
]

BATCHES_PATH = "/v1/messages/batches"
MAX_BATCH_REQUESTS = 100_000
MAX_BATCH_BYTES = 256 * 1024 * 1024
EXPIRES_AFTER_SECONDS = 86_400.0
MAX_BATCHES_KEPT = 1_000
"""Batches kept (the oldest ended ones go first): a fake left running for days stays bounded."""
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
RESULTS_CONTENT_TYPE = "application/x-jsonl"
ITEM_ERRORS = (("api_error", "Internal server error"), ("overloaded_error", "Overloaded"))
"""What an item drawn ``errored`` answers."""
_HALF = Decimal("0.5")


@dataclass
class Item:
    custom_id: str
    request: MessagesRequest | None
    outcome: str
    """What it ends as: succeeded, errored, expired or canceled."""
    due: float
    """When it ends (the state's monotonic clock)."""
    error: tuple[str, str] | None = None
    """An errored item's (type, message)."""


@dataclass
class Batch:
    id: str
    created_at: float
    """Wall clock (epoch seconds)."""
    started: float
    """The monotonic clock at creation: an item ends at created_at + (due - started)."""
    pending: list[Item]
    """Items still processing, the next to end last."""
    results: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(custom_id, result) of each ended item, in the order they ended."""
    counts: dict[str, int] = field(default_factory=dict)
    cancel_initiated_at: float | None = None
    ended_at: float | None = None

    def status(self) -> str:
        if self.ended_at is not None:
            return "ended"
        return "in_progress" if self.cancel_initiated_at is None else "canceling"

    def as_json(self, base_url: str) -> dict[str, Any]:
        ended = self.ended_at is not None
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.status(),
            "request_counts": dict(self.counts),
            "ended_at": _stamp(self.ended_at),
            "created_at": _stamp(self.created_at),
            "expires_at": _stamp(self.created_at + EXPIRES_AFTER_SECONDS),
            "cancel_initiated_at": _stamp(self.cancel_initiated_at),
            "archived_at": None,
            "results_url": f"{base_url}{BATCHES_PATH}/{self.id}/results" if ended else None,
        }


@dataclass
class Answer:
    status: int
    body: bytes
    headers: list[tuple[str, str]]
    content_type: str = "application/json"


def _stamp(epoch: float | None) -> str | None:
    """RFC 3339 with microseconds, as the API writes its timestamps."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def batch_price(price: Price) -> Price:
    """The batch price: half the standard price of every kind of token."""
    return replace(
        price,
        input=price.input * _HALF,
        cache_write_5m=price.cache_write_5m * _HALF,
        cache_write_1h=price.cache_write_1h * _HALF,
        cache_read=price.cache_read * _HALF,
        output=price.output * _HALF,
    )


# --- processing ---------------------------------------------------------------------------------


def _end(state: FakeProviderState, batch: Batch, item: Item) -> None:
    result: dict[str, Any] = {"type": item.outcome}
    if item.outcome == "succeeded" and item.request is not None:
        message = build_message(item.request, state)
        state.bill(
            batch_price(item.request.price),
            message["usage"],
            state.epoch,
            how="batch",
            batch_item=(batch.id, item.custom_id),
        )
        result["message"] = message
    elif item.outcome == "errored" and item.error is not None:
        kind, text = item.error
        result["error"] = {"type": "error", "error": {"type": kind, "message": text}}
    batch.results.append((item.custom_id, result))
    batch.counts["processing"] -= 1
    batch.counts[item.outcome] += 1
    state.batch_results[item.outcome] += 1


def advance(state: FakeProviderState, batch: Batch) -> None:
    """End the batch's items whose moment has come; the batch, once none is left."""
    now = state.now()
    while batch.pending and batch.pending[-1].due <= now:
        item = batch.pending.pop()
        _end(state, batch, item)
        if not batch.pending:
            batch.ended_at = batch.created_at + (item.due - batch.started)


def advance_batches(state: FakeProviderState) -> None:
    for batch in state.batches.values():
        if batch.pending:
            advance(state, batch)


def _draw(
    state: FakeProviderState, request: MessagesRequest | None, missing: str
) -> tuple[str, tuple[str, str] | None]:
    """An item's outcome and error: errored for a model the fake does not know (``missing``),
    else by the configured shares."""
    if request is None:
        return "errored", ("not_found_error", missing)
    config = state.config
    point = state.rng.random()
    if point < config.batch_errored_rate:
        return "errored", state.rng.choice(ITEM_ERRORS)
    if point < config.batch_errored_rate + config.batch_expired_rate:
        return "expired", None
    return "succeeded", None


# --- the routes ---------------------------------------------------------------------------------


def _invalid(message: str) -> ApiError:
    return ApiError(400, message)


def _parse(state: FakeProviderState, body: bytes, start: float) -> list[Item]:
    """The items of a create body, validated as the API does (ApiError 400), each with its
    outcome and the moment it ends, from ``start``."""
    try:
        payload = json.loads(body)
    except ValueError:
        raise _invalid(
            "There was an error parsing the body of your request. "
            "Please check that it is valid JSON."
        ) from None
    if not isinstance(payload, dict):
        raise _invalid("Request body must be a JSON object")
    if "requests" not in payload:
        raise _invalid("requests: Field required")
    requests = payload["requests"]
    if not isinstance(requests, list):
        raise _invalid("requests: Input should be a valid list")
    if not 1 <= len(requests) <= MAX_BATCH_REQUESTS:
        raise _invalid(
            f"requests: a batch holds 1 to {MAX_BATCH_REQUESTS} requests, not {len(requests)}"
        )
    seen: set[str] = set()
    parsed: list[tuple[str, MessagesRequest | None, str]] = []
    for i, entry in enumerate(requests):
        where = f"requests.{i}"
        if not isinstance(entry, dict):
            raise _invalid(f"{where}: Input should be a valid dictionary")
        for name in ("custom_id", "params"):
            if name not in entry:
                raise _invalid(f"{where}.{name}: Field required")
        custom_id, params = entry["custom_id"], entry["params"]
        if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
            raise _invalid(
                f"{where}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )
        if custom_id in seen:
            raise _invalid(
                f"{where}.custom_id: {custom_id!r} is used by an earlier request; "
                "custom_id must be unique within a batch"
            )
        seen.add(custom_id)
        if isinstance(params, dict) and params.get("stream", False) is not False:
            raise _invalid(f"{where}.params.stream: Input should be False")
        try:
            parsed.append((custom_id, parse_request(params), ""))
        except ApiError as error:
            if error.status != 404:
                raise _invalid(f"{where}.params.{error.message}") from None
            parsed.append((custom_id, None, error.message))  # an unknown model: errored
    seconds = state.config.batch_processing_seconds
    slots = [start + seconds * (k + 1) / len(parsed) for k in range(len(parsed))]
    state.rng.shuffle(slots)
    items = []
    for (custom_id, request, missing), due in zip(parsed, slots, strict=True):
        outcome, failure = _draw(state, request, missing)
        if outcome == "expired":
            due = start + seconds  # not reached before the batch's time ran out
        items.append(Item(custom_id, request, outcome, due, failure))
    return items


def _create(state: FakeProviderState, body: bytes, base_url: str) -> dict[str, Any]:
    start = state.now()
    items = _parse(state, body, start)
    batch = Batch(
        "msgbatch_" + uuid.uuid4().hex[:24],
        state.wall(),
        start,
        sorted(items, key=lambda item: item.due, reverse=True),
        counts={"processing": len(items), **dict.fromkeys(state.batch_results, 0)},
    )
    # Bounded, as the billing log is: past MAX_BATCHES_KEPT the oldest ended ones are forgotten.
    excess = len(state.batches) + 1 - MAX_BATCHES_KEPT
    if excess > 0:
        done = [old.id for old in state.batches.values() if old.ended_at is not None]
        for old_id in done[:excess]:
            del state.batches[old_id]
    state.batches[batch.id] = batch
    state.batch_requests += len(items)
    return batch.as_json(base_url)


def _list(state: FakeProviderState, query: str, base_url: str) -> dict[str, Any]:
    params = {name: values[-1] for name, values in parse_qs(query).items()}
    try:
        limit = int(params.get("limit", "20"))
    except ValueError:
        raise _invalid("limit: Input should be a valid integer") from None
    if not 1 <= limit <= 1000:
        raise _invalid("limit: Input should be between 1 and 1000")
    newest_first = list(reversed(state.batches))
    before, after = params.get("before_id"), params.get("after_id")
    if before and after:
        raise _invalid("before_id and after_id cannot both be given")
    for cursor in (before, after):
        if cursor and cursor not in state.batches:
            raise ApiError(404, f"No Message Batch with id {cursor}")
    if before:
        newer = newest_first[: newest_first.index(before)]
        page, has_more = newer[-limit:], len(newer) > limit
    else:
        older = newest_first[newest_first.index(after) + 1 :] if after else newest_first
        page, has_more = older[:limit], len(older) > limit
    return {
        "data": [state.batches[batch_id].as_json(base_url) for batch_id in page],
        "has_more": has_more,
        "first_id": page[0] if page else None,
        "last_id": page[-1] if page else None,
    }


def _cancel(state: FakeProviderState, batch: Batch, base_url: str) -> dict[str, Any]:
    if batch.ended_at is not None:
        raise _invalid(f"Message Batch {batch.id} has already ended; it cannot be canceled.")
    if batch.cancel_initiated_at is None:
        batch.cancel_initiated_at = state.wall()
        now = state.now()
        for item in batch.pending:
            item.outcome, item.due = "canceled", now
    return batch.as_json(base_url)  # canceling: the next read ends it


def _results(batch: Batch) -> Answer:
    if batch.ended_at is None:
        raise _invalid(
            f"Message Batch {batch.id} has not finished processing; its results are available "
            "once its processing_status is 'ended'."
        )
    lines = (
        json.dumps({"custom_id": custom_id, "result": result}, separators=(",", ":")) + "\n"
        for custom_id, result in batch.results
    )
    disposition = f"attachment; filename*=utf-8''{batch.id}_results.jsonl"
    return Answer(
        200,
        "".join(lines).encode(),
        [("content-disposition", disposition)],
        RESULTS_CONTENT_TYPE,
    )


def _has_key(headers: dict[str, str]) -> bool:
    bearer = headers.get("authorization", "")
    return bool(headers.get("x-api-key")) or (
        bearer.lower().startswith("bearer ") and bool(bearer[7:].strip())
    )


def handle(
    state: FakeProviderState,
    method: str,
    path: str,
    headers: dict[str, str],
    query: str,
    body: bytes,
    base_url: str,
) -> Answer:
    """Answers one request to a path under ``BATCHES_PATH`` (``headers``: lower-case names)."""
    request_id = new_request_id()
    try:
        payload = _route(state, method, path, headers, query, body, base_url)
    except ApiError as error:
        retry = "true" if should_retry(error) else "false"
        return Answer(
            error.status,
            json.dumps(error_body(error, request_id)).encode(),
            [("request-id", request_id), ("x-should-retry", retry)],
        )
    if isinstance(payload, Answer):
        payload.headers.append(("request-id", request_id))
        return payload
    return Answer(200, json.dumps(payload).encode(), [("request-id", request_id)])


def _route(
    state: FakeProviderState,
    method: str,
    path: str,
    headers: dict[str, str],
    query: str,
    body: bytes,
    base_url: str,
) -> dict[str, Any] | Answer:
    parts = path[len(BATCHES_PATH) :].strip("/").split("/") if path != BATCHES_PATH else []
    if len(parts) > 2 or (len(parts) == 2 and parts[1] not in ("cancel", "results")):
        raise ApiError(404, "Not found")
    route = "list" if not parts else parts[1] if len(parts) == 2 else "batch"
    allowed = {"list": "GET POST", "batch": "GET DELETE", "cancel": "POST", "results": "GET"}
    if method not in allowed[route].split():
        raise ApiError(405, f"Method {method} not allowed for {path}")
    if not _has_key(headers):
        raise ApiError(401, "x-api-key header is required")
    if not parts:
        if method == "POST":
            return _create(state, body, base_url)
        advance_batches(state)
        return _list(state, query, base_url)
    batch = state.batches.get(parts[0])
    if batch is None:
        raise ApiError(404, f"No Message Batch with id {parts[0]}")
    advance(state, batch)
    if len(parts) == 2:
        return _cancel(state, batch, base_url) if parts[1] == "cancel" else _results(batch)
    if method == "DELETE":
        if batch.ended_at is None:
            raise _invalid(
                f"Message Batch {batch.id} is still processing: cancel it and wait for it to "
                "end before deleting it."
            )
        del state.batches[batch.id]
        return {"id": batch.id, "type": "message_batch_deleted"}
    return batch.as_json(base_url)
