"""The Message Batches API at ``/anthropic/v1/messages/batches`` (docs/front-doors.md#message-
batches), so that ``client.messages.batches`` works unchanged: thin async views, each running
one sync step on the doors' threads (gateway/message_batches.py), in the API's shapes
(gateway/message_batch_shapes.py)."""

from collections.abc import AsyncIterator
from typing import Any, cast
from uuid import UUID

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.urls import reverse

from batches.models import Batch
from gateway import message_batch_shapes as shapes
from gateway.anthropic_views import error_response, method_not_allowed
from gateway.calls import call_body, door_errors, front_door
from gateway.errors import GatewayError
from gateway.headers import call_options
from gateway.message_batches import (
    message_batch_cancel,
    message_batch_counts,
    message_batch_create,
    message_batch_delete,
    message_batch_get,
    message_batch_results_chunk,
    message_batches_page,
)
from gateway.services import call_authenticate, call_throttle, secret_of
from gateway.waiting import in_thread
from keys.scopes import JOBS_READ, JOBS_WRITE

__all__ = ["message_batch", "message_batch_cancel_view", "message_batch_results", "message_batches"]


def _user(request: HttpRequest, scope: str) -> User:
    return cast(User, call_authenticate(secret=secret_of(request), scope=scope).user)


def _shown(request: HttpRequest, batch: Batch) -> dict[str, Any]:
    """The batch as the API shows it, its ``results_url`` on this door."""
    results_url = request.build_absolute_uri(
        f"{reverse('anthropic-message-batches')}/{shapes.batch_id_of(batch)}/results"
    )
    return shapes.batch_object(batch, counts=message_batch_counts(batch), results_url=results_url)


def _create(request: HttpRequest) -> dict[str, Any]:
    with door_errors():
        key = call_authenticate(secret=secret_of(request), scope=JOBS_WRITE)
        call_throttle(request=request, key=key)
        batch = message_batch_create(
            key=key, body=call_body(request), options=call_options(request.headers)
        )
        return _shown(request, batch)


def _list(request: HttpRequest) -> dict[str, Any]:
    with door_errors():
        user = _user(request, JOBS_READ)
        try:
            limit = min(1000, max(1, int(request.GET.get("limit") or 20)))
        except ValueError:
            raise GatewayError(400, "limit must be a number.", param="limit") from None
        page, has_more = message_batches_page(
            user=user,
            limit=limit,
            after_id=request.GET.get("after_id"),
            before_id=request.GET.get("before_id"),
        )
        shown = [_shown(request, batch) for batch in page]
    return {
        "data": shown,
        "has_more": has_more,
        "first_id": shown[0]["id"] if shown else None,
        "last_id": shown[-1]["id"] if shown else None,
    }


@front_door
async def message_batches(request: HttpRequest) -> HttpResponseBase:
    """``POST``: create a batch; ``GET``: list them (``limit``, ``after_id``, ``before_id``)."""
    step = {"POST": _create, "GET": _list}.get(request.method or "")
    if step is None:
        return method_not_allowed("GET or POST")
    try:
        return JsonResponse(await in_thread(step)(request))
    except GatewayError as error:
        return error_response(error)


def _retrieve(request: HttpRequest, batch_id: str) -> dict[str, Any]:
    with door_errors():
        batch = message_batch_get(user=_user(request, JOBS_READ), batch_id=batch_id)
        return _shown(request, batch)


def _delete(request: HttpRequest, batch_id: str) -> dict[str, Any]:
    with door_errors():
        message_batch_delete(user=_user(request, JOBS_WRITE), batch_id=batch_id)
    return shapes.deleted_object(batch_id)


@front_door
async def message_batch(request: HttpRequest, batch_id: str) -> HttpResponseBase:
    """``GET``: the batch; ``DELETE``: delete an ended batch."""
    step = {"GET": _retrieve, "DELETE": _delete}.get(request.method or "")
    if step is None:
        return method_not_allowed("GET or DELETE")
    try:
        return JsonResponse(await in_thread(step)(request, batch_id))
    except GatewayError as error:
        return error_response(error)


def _cancel(request: HttpRequest, batch_id: str) -> dict[str, Any]:
    with door_errors():
        batch = message_batch_cancel(user=_user(request, JOBS_WRITE), batch_id=batch_id)
        return _shown(request, batch)


@front_door
async def message_batch_cancel_view(request: HttpRequest, batch_id: str) -> HttpResponseBase:
    """``POST .../cancel``."""
    if request.method != "POST":
        return method_not_allowed("POST")
    try:
        return JsonResponse(await in_thread(_cancel)(request, batch_id))
    except GatewayError as error:
        return error_response(error)


def _ended(request: HttpRequest, batch_id: str) -> UUID:
    with door_errors():
        batch = message_batch_get(user=_user(request, JOBS_READ), batch_id=batch_id)
    if batch.finished_at is None:
        raise GatewayError(
            400,
            f"Message batch {batch_id} has not ended: its results are there once its "
            "processing_status is ended.",
            code="not_ended",
        )
    return batch.id


async def _lines(batch_id: UUID) -> AsyncIterator[bytes]:
    after = -1
    while True:
        chunk = await in_thread(message_batch_results_chunk)(batch_id=batch_id, after_index=after)
        if not chunk:
            return
        for _index, line in chunk:
            yield line
        after = chunk[-1][0]


@front_door
async def message_batch_results(request: HttpRequest, batch_id: str) -> HttpResponseBase:
    """``GET .../results``: one JSON line per request, in request order, once the batch ended."""
    if request.method != "GET":
        return method_not_allowed("GET")
    try:
        batch_uuid = await in_thread(_ended)(request, batch_id)
    except GatewayError as error:
        return error_response(error)
    return StreamingHttpResponse(_lines(batch_uuid), content_type="application/x-jsonl")
