"""The Anthropic Messages API's shapes at the front door (docs/front-doors.md): a request body as
a job's submit body, a completed job as a Message, its content as the server-sent events the API
streams, errors as the API words them. Pure: no database, no network."""

import json
from typing import Any

from gateway.errors import GatewayError
from gateway.headers import CallOptions
from jobs.models import LlmJob

__all__ = [
    "ERROR_TYPES",
    "block_events",
    "error_body",
    "job_data",
    "message_delta_events",
    "message_of",
    "message_start",
    "ping",
    "sse",
    "usage_of",
]

PASSED = (
    "model",
    "messages",
    "max_tokens",
    "system",
    "temperature",
    "metadata",
    "tools",
    "tool_choice",
    "stop_sequences",
    "top_p",
    "top_k",
    "thinking",
)
"""The Messages API fields a job carries as given (jobs/validation.py checks them)."""
DOOR_FIELDS = ("stream", "service_tier")
"""Fields of the door itself: ``stream`` chooses the answer's form; ``service_tier`` is the
provider's to choose and is not sent."""

ERROR_TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "conflict": "invalid_request_error",
    "request_too_large": "request_too_large",
    "rate_limit": "rate_limit_error",
    "api_error": "api_error",
    "overloaded": "overloaded_error",
    "timeout": "timeout_error",
}
"""A ``GatewayError`` kind -> the API's ``error.type``."""


def error_body(error: GatewayError) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ERROR_TYPES[error.kind], "message": error.message}}


def job_data(body: Any, options: CallOptions) -> dict[str, Any]:
    """The job submit body (jobs/validation.py) of a Messages API request: a real-time job of the
    call's feature, tags and deadline."""
    if not isinstance(body, dict):
        raise GatewayError(400, "The body must be a JSON object.", code="invalid_body")
    unknown = sorted(set(body) - set(PASSED) - set(DOOR_FIELDS))
    if unknown:
        raise GatewayError(
            400,
            f"{', '.join(unknown)}: not supported by llmops's Anthropic front door "
            "(docs/front-doors.md#not-supported).",
            code="unknown_field",
            param=unknown[0],
        )
    data = {name: body[name] for name in PASSED if body.get(name) is not None}
    return {**data, **options.job_fields(), "mode": "realtime"}


def message_id(job: LlmJob) -> str:
    return f"msg_{job.id.hex}"


def usage_of(job: LlmJob) -> dict[str, int]:
    return {
        "input_tokens": job.input_tokens or 0,
        "output_tokens": job.output_tokens or 0,
        "cache_creation_input_tokens": job.cache_creation_input_tokens or 0,
        "cache_read_input_tokens": job.cache_read_input_tokens or 0,
    }


def content_of(job: LlmJob) -> list[dict[str, Any]]:
    if job.output_content:
        return list(job.output_content)
    return [{"type": "text", "text": job.output_text or ""}]


def _stop_sequence(job: LlmJob) -> str | None:
    """The stop sequence that ended the answer, when the job can say which (it keeps the stop
    reason, not the sequence): the only one it asked for."""
    sequences = (job.params or {}).get("stop_sequences") or []
    if job.stop_reason == "stop_sequence" and len(sequences) == 1:
        return str(sequences[0])
    return None


def model_of(job: LlmJob) -> str:
    """The model that answered (a fallback's, when the job moved)."""
    return job.served_by or job.current_model or job.model


def message_of(job: LlmJob) -> dict[str, Any]:
    """A completed job as the API's Message."""
    return {
        "id": message_id(job),
        "type": "message",
        "role": "assistant",
        "model": model_of(job),
        "content": content_of(job),
        "stop_reason": job.stop_reason or "end_turn",
        "stop_sequence": _stop_sequence(job),
        "usage": usage_of(job),
    }


# --- Streaming ----------------------------------------------------------------------------------


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def ping() -> bytes:
    return sse("ping", {"type": "ping"})


def message_start(job: LlmJob, model: str) -> bytes:
    """The stream's first event. Its usage is zero: the job's usage is known at its end, and the
    ``message_delta`` before ``message_stop`` carries all of it (the SDKs take its counts)."""
    return sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id(job),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            },
        },
    )


def text_start(index: int) -> bytes:
    return sse(
        "content_block_start",
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
    )


def text_delta(index: int, text: str) -> bytes:
    return sse(
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": text},
        },
    )


def block_stop(index: int) -> bytes:
    return sse("content_block_stop", {"type": "content_block_stop", "index": index})


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return sse(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def _start(index: int, block: dict[str, Any]) -> bytes:
    return sse(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def block_events(index: int, block: dict[str, Any], *, streamed: str = "") -> list[bytes]:
    """The events of one content block as the API streams it: its start, its deltas (text,
    thinking and its signature, a tool call's input as JSON), its stop. ``streamed``: the text
    of a text block given out already (its start sent too): only the rest follows."""
    kind = block.get("type")
    events: list[bytes] = []
    if kind == "text":
        text = str(block.get("text") or "")
        if not streamed:
            events.append(text_start(index))
        if text[len(streamed) :]:
            events.append(text_delta(index, text[len(streamed) :]))
    elif kind == "thinking":
        events.append(_start(index, {"type": "thinking", "thinking": "", "signature": ""}))
        if block.get("thinking"):
            events.append(_delta(index, {"type": "thinking_delta", "thinking": block["thinking"]}))
        if block.get("signature"):
            events.append(
                _delta(index, {"type": "signature_delta", "signature": block["signature"]})
            )
    elif kind in ("tool_use", "server_tool_use"):
        events.append(_start(index, {**block, "input": {}}))
        events.append(
            _delta(
                index,
                {"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})},
            )
        )
    else:  # redacted thinking, a server tool's result: whole in its start
        events.append(_start(index, block))
    events.append(block_stop(index))
    return events


def message_delta_events(job: LlmJob) -> list[bytes]:
    """The stream's end: the stop reason and the whole usage, then ``message_stop`` with the
    job's id and cost (``llmops``, which the SDKs ignore: no header can carry a cost known only
    after the headers went)."""
    return [
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": job.stop_reason or "end_turn",
                    "stop_sequence": _stop_sequence(job),
                },
                "usage": usage_of(job),
            },
        ),
        sse(
            "message_stop",
            {
                "type": "message_stop",
                "llmops": {"job_id": str(job.id), "cost_usd": str(job.cost_usd)},
            },
        ),
    ]


def error_event(error: GatewayError) -> bytes:
    """An error inside a stream that has started, as the API sends one (the SDKs raise it)."""
    return sse("error", error_body(error))
