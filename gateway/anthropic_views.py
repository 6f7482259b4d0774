"""The Anthropic Messages API at ``/anthropic`` (docs/front-doors.md), so that
``anthropic.Anthropic(base_url=".../anthropic", api_key=<llmops key>)`` works unchanged: thin
async views over gateway/calls.py, in the API's own shapes (gateway/anthropic_shapes.py)."""

import json
from collections.abc import AsyncIterator
from datetime import UTC
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from api.errors import ApplicationError
from gateway import anthropic_shapes as shapes
from gateway.calls import Call, CallStream, front_door
from gateway.errors import GatewayError, from_application_error, from_job
from gateway.headers import CallOptions
from gateway.responses import DoorResponses
from gateway.selectors import door_models
from gateway.services import call_authenticate, call_count_tokens, secret_of
from gateway.waiting import in_thread
from jobs.models import LlmJob
from jobs.validation import JobRequest, validate_job_request
from keys.scopes import JOBS_WRITE

__all__ = [
    "count_tokens",
    "error_response",
    "messages",
    "method_not_allowed",
    "model_detail",
    "models",
    "not_found",
]

RESPONSES = DoorResponses(shapes.error_body)
error_response = RESPONSES.error
method_not_allowed = RESPONSES.method_not_allowed


def _translate(body: Any, options: CallOptions) -> JobRequest:
    return validate_job_request(shapes.job_data(body, options))


def _live(body: dict[str, Any]) -> bool:
    """Whether the answer's text can be streamed as it comes: its first block is text unless the
    model thinks first or runs a server tool first; such answers stream whole at their end."""
    thinking = (body.get("thinking") or {}).get("type") == "enabled"
    server_tools = any(
        isinstance(tool, dict) and tool.get("type", "custom") != "custom"
        for tool in body.get("tools") or []
    )
    return not thinking and not server_tools


@front_door
async def messages(request: HttpRequest) -> HttpResponseBase:
    """``POST /anthropic/v1/messages``: the answer once the job completed, or its events."""
    return await RESPONSES.call(request, translate=_translate, answer=_answer, stream=_stream)


async def _answer(call: Call, job: LlmJob) -> dict[str, Any]:
    return shapes.message_of(job)


async def _stream(call: Call) -> HttpResponseBase:
    return await RESPONSES.stream(call, live=_live(call.body), events=_events)


async def _events(call: Call, stream: CallStream, first: str) -> AsyncIterator[bytes]:
    """The stream as the API sends it: ``message_start``, a ``ping``, the text block's deltas as
    the job streams, then the rest of the answer's blocks, ``message_delta`` and
    ``message_stop``; an ``error`` event if the job failed after its text began."""
    try:
        yield shapes.message_start(call.job, call.job.model)
        yield shapes.ping()
        opened = bool(first)
        if first:
            yield shapes.text_start(0)
            yield shapes.text_delta(0, first)
        async for piece in stream.pieces():
            if not piece:
                yield shapes.ping()
                continue
            if not opened:
                opened = True
                yield shapes.text_start(0)
            yield shapes.text_delta(0, piece)
        job = stream.job or await stream.end()
        if job.status != LlmJob.Status.COMPLETED:
            yield shapes.error_event(from_job(job))
            return
        blocks = shapes.content_of(job)
        given = stream.given
        if given and not (blocks[0].get("type") == "text" and blocks[0]["text"].startswith(given)):
            yield shapes.error_event(
                GatewayError(
                    500,
                    f"The answer was retried after its text began, and the retry answered "
                    f"otherwise; the whole answer is job {job.id}'s output in the job API.",
                )
            )
            return
        for index, block in enumerate(blocks):
            for event in shapes.block_events(index, block, streamed=given if index == 0 else ""):
                yield event
        for event in shapes.message_delta_events(job):
            yield event
    finally:
        await stream.close()


# --- Models -------------------------------------------------------------------------------------


def _model(model: Any) -> dict[str, Any]:
    return {
        "type": "model",
        "id": model.id,
        "display_name": model.id,
        "created_at": model.created.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    }


@front_door
async def models(request: HttpRequest) -> HttpResponseBase:
    """``GET /anthropic/v1/models``: the chat models a call may name, paged as the API pages
    (``limit``, ``after_id``, ``before_id``)."""
    if refused := await RESPONSES.refused_read(request):
        return refused
    listed = [_model(m) for m in await in_thread(door_models)(kind="chat")]
    ids = [m["id"] for m in listed]
    after, before = request.GET.get("after_id"), request.GET.get("before_id")
    try:
        limit = min(1000, max(1, int(request.GET.get("limit") or 20)))
    except ValueError:
        return error_response(GatewayError(400, "limit must be a number.", param="limit"))
    if after in ids:
        listed = listed[ids.index(after) + 1 :]
    elif before in ids:
        listed = listed[: ids.index(before)]
        listed = listed[-limit:]
    page = listed[:limit]
    return JsonResponse(
        {
            "data": page,
            "has_more": len(listed) > len(page),
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
        }
    )


@front_door
async def model_detail(request: HttpRequest, model_id: str) -> HttpResponseBase:
    """``GET /anthropic/v1/models/<id>``."""
    if refused := await RESPONSES.refused_read(request):
        return refused
    for model in await in_thread(door_models)(kind="chat"):
        if model.id == model_id:
            return JsonResponse(_model(model))
    return error_response(GatewayError(404, f"No model {model_id!r}.", param="model"))


@front_door
async def not_found(request: HttpRequest, rest: str = "") -> HttpResponseBase:
    """Any other path under ``/anthropic/``: the API's 404, saying where the API is."""
    return error_response(
        GatewayError(
            404,
            f"No such endpoint: {request.method} {request.path}. The Anthropic front door serves "
            "/anthropic/v1/messages, /anthropic/v1/messages/count_tokens, "
            "/anthropic/v1/messages/batches and /anthropic/v1/models "
            '(base_url="http://<host>/anthropic").',
        )
    )


@front_door
async def count_tokens(request: HttpRequest) -> HttpResponseBase:
    """``POST /anthropic/v1/messages/count_tokens``: the provider's count (no job)."""
    if request.method != "POST":
        return method_not_allowed("POST")
    try:
        counted = await in_thread(_count)(request)
    except GatewayError as error:
        return error_response(error)
    return JsonResponse({"input_tokens": counted})


def _count(request: HttpRequest) -> int:
    call_authenticate(secret=secret_of(request), scope=JOBS_WRITE)
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        raise GatewayError(400, "The body is not valid JSON.", code="malformed_json") from None
    if not isinstance(body, dict):
        raise GatewayError(400, "The body must be a JSON object.", code="invalid_body")
    try:
        return call_count_tokens(body=body)
    except ApplicationError as exc:
        raise from_application_error(exc) from None
