"""The OpenAI Chat Completions, Embeddings and Models APIs at ``/openai/v1`` (docs/front-doors.md),
so that ``openai.OpenAI(base_url=".../openai/v1", api_key=<llmops key>)`` works unchanged: thin
async views over gateway/calls.py, in the API's own shapes (gateway/openai_shapes.py). Every
model a call may name answers here, Claude's too: the job is translated as
providers/openai_translate.py translates it for an OpenAI-compatible provider, the other way."""

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from embeddings.validation import validate_embedding_request
from gateway import openai_requests
from gateway import openai_shapes as shapes
from gateway.anthropic_shapes import content_of
from gateway.calls import Call, CallStream, front_door
from gateway.errors import GatewayError, from_job
from gateway.headers import CallOptions
from gateway.responses import DoorResponses
from gateway.selectors import door_models, job_vectors, vector_bytes
from gateway.waiting import in_thread
from jobs.deadlines import validate_deadline
from jobs.models import LlmJob
from jobs.tags import validate_tags
from jobs.validation import JobRequest, validate_job_request
from ledger.selectors import price_for_model

__all__ = ["chat_completions", "embeddings", "model_detail", "models", "not_found"]

RESPONSES = DoorResponses(shapes.error_body)
error_response = RESPONSES.error


def _translate_chat(body: Any, options: CallOptions) -> JobRequest:
    model = body.get("model") if isinstance(body, dict) else None
    price = price_for_model(model=model) if isinstance(model, str) and model else None
    limit = price.max_output_tokens if price is not None else None
    return validate_job_request(openai_requests.job_data(body, options, max_output_tokens=limit))


@front_door
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    """``POST /openai/v1/chat/completions``: the completion once the job completed, or its
    chunks."""
    return await RESPONSES.call(
        request, translate=_translate_chat, answer=_answer_chat, stream=_stream
    )


async def _answer_chat(call: Call, job: LlmJob) -> dict[str, Any]:
    return shapes.completion_of(job)


async def _stream(call: Call) -> HttpResponseBase:
    return await RESPONSES.stream(call, live=True, events=_chunks)


async def _chunks(call: Call, stream: CallStream, first: str) -> AsyncIterator[bytes]:
    """The chunks as the API streams them: the role, the text as the job streams, then the tool
    calls, the finish reason, the usage when ``stream_options.include_usage`` asks, ``[DONE]``;
    an error chunk if the job failed after its text began."""
    options = call.body.get("stream_options") or {}
    with_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    model = call.job.model
    try:
        yield shapes.chunk(
            call.job, model, {"role": "assistant", "content": ""}, with_usage=with_usage
        )
        if first:
            yield shapes.chunk(call.job, model, {"content": first}, with_usage=with_usage)
        async for piece in stream.pieces():
            if piece:
                yield shapes.chunk(call.job, model, {"content": piece}, with_usage=with_usage)
            else:
                yield b": ping\n\n"  # an SSE comment: keeps the connection, read by no one
        job = stream.job or await stream.end()
        if job.status != LlmJob.Status.COMPLETED:
            yield shapes.error_chunk(from_job(job))
            return
        text = "".join(
            str(block.get("text") or "") for block in content_of(job) if block.get("type") == "text"
        )
        if not text.startswith(stream.given):
            yield shapes.error_chunk(
                GatewayError(
                    500,
                    "The answer was retried after its text began, and the retry answered "
                    f"otherwise; the whole answer is job {job.id}'s output in the job API.",
                )
            )
            return
        for part in shapes.tail_chunks(job, given=stream.given, with_usage=with_usage):
            yield part
    finally:
        await stream.close()


# --- Embeddings ---------------------------------------------------------------------------------


def _translate_embeddings(body: Any, options: CallOptions) -> JobRequest:
    data, _encoding = openai_requests.embedding_data(body, options)
    request = validate_embedding_request(data)
    deadline, given = validate_deadline(
        {"deadline_seconds": options.deadline_seconds} if options.deadline_seconds else {}
    )
    return replace(
        request,
        tags=validate_tags(options.tags) or None,
        deadline=deadline,
        deadline_given=given,
        mode="realtime",
        priority=options.priority,
    )


def _vectors(job: LlmJob, encoding: str) -> dict[str, Any]:
    vectors = job_vectors(job_id=job.id)
    encoded = [vector_bytes(v) for v in vectors] if encoding == "base64" else None
    return shapes.embeddings_answer(job, vectors, encoded)


async def _answer_embeddings(call: Call, job: LlmJob) -> dict[str, Any]:
    answer: dict[str, Any] = await in_thread(_vectors)(
        job, call.body.get("encoding_format") or "float"
    )
    return answer


@front_door
async def embeddings(request: HttpRequest) -> HttpResponseBase:
    """``POST /openai/v1/embeddings``: an embedding job (as ``POST /api/v1/embeddings/``
    submits), answered once it completed."""
    return await RESPONSES.call(request, translate=_translate_embeddings, answer=_answer_embeddings)


# --- Models -------------------------------------------------------------------------------------


def _model(model: Any) -> dict[str, Any]:
    return {
        "id": model.id,
        "object": "model",
        "created": int(model.created.timestamp()),
        "owned_by": model.provider,
    }


@front_door
async def models(request: HttpRequest) -> HttpResponseBase:
    """``GET /openai/v1/models``: every model a call may name (chat and embedding)."""
    if refused := await RESPONSES.refused_read(request):
        return refused
    listed = [_model(m) for m in await in_thread(door_models)()]
    return JsonResponse({"object": "list", "data": listed})


@front_door
async def model_detail(request: HttpRequest, model_id: str) -> HttpResponseBase:
    """``GET /openai/v1/models/<id>``."""
    if refused := await RESPONSES.refused_read(request):
        return refused
    for model in await in_thread(door_models)():
        if model.id == model_id:
            return JsonResponse(_model(model))
    return error_response(
        GatewayError(404, f"The model {model_id!r} does not exist.", code="unknown_model")
    )


@front_door
async def not_found(request: HttpRequest, rest: str = "") -> HttpResponseBase:
    """Any other path under ``/openai/``: the API's 404, saying where the API is."""
    return error_response(
        GatewayError(
            404,
            f"No such endpoint: {request.method} {request.path}. The OpenAI front door serves "
            "/openai/v1/chat/completions, /openai/v1/embeddings and /openai/v1/models "
            '(base_url="http://<host>/openai/v1").',
        )
    )
