"""The OpenAI Chat Completions, Embeddings and Models APIs' answers at the front door
(docs/front-doors.md): a completed job as a chat completion or its chunks, vectors as an
embeddings answer, errors as the API words them. Pure: no database, no network. The requests
come in through gateway/openai_requests.py.

``finish_reason`` is providers/openai_translate.py's ``FINISH_REASONS``: the table the
OpenAI-compatible provider reads the other way."""

import base64
import json
from typing import Any

from gateway.anthropic_shapes import content_of, model_of
from gateway.errors import GatewayError
from jobs.models import LlmJob
from providers.openai_translate import FINISH_REASONS

__all__ = [
    "chunk",
    "completion_of",
    "embeddings_answer",
    "error_body",
    "error_chunk",
    "sse_data",
    "tail_chunks",
    "usage_of",
]

ERROR_TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "invalid_request_error",
    "conflict": "invalid_request_error",
    "request_too_large": "invalid_request_error",
    "rate_limit": "rate_limit_error",
    "api_error": "server_error",
    "overloaded": "server_error",
    "timeout": "server_error",
}
_CODES = {"unknown_model": "model_not_found", "authentication_failed": "invalid_api_key"}


def error_body(error: GatewayError) -> dict[str, Any]:
    return {
        "error": {
            "message": error.message,
            "type": ERROR_TYPES[error.kind],
            "param": error.param,
            "code": _CODES.get(error.code, error.code or None),
        }
    }


# --- Answers ------------------------------------------------------------------------------------


def usage_of(job: LlmJob) -> dict[str, Any]:
    """The job's usage in the API's words: ``prompt_tokens`` counts every input token (cached
    ones and cache writes too), ``cached_tokens`` the cache reads (as usage_of in
    providers/openai_translate.py reads them the other way)."""
    cached = job.cache_read_input_tokens or 0
    prompt = (job.input_tokens or 0) + cached + (job.cache_creation_input_tokens or 0)
    completion = job.output_tokens or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _text_and_calls(job: LlmJob) -> tuple[str, list[dict[str, Any]]]:
    texts, calls = [], []
    for block in content_of(job):
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name") or ""),
                        "arguments": json.dumps(block.get("input") or {}),
                    },
                }
            )
    return "".join(texts), calls


def finish_reason(job: LlmJob) -> str:
    return FINISH_REASONS.get(job.stop_reason or "", "stop")


def completion_id(job: LlmJob) -> str:
    return f"chatcmpl-{job.id.hex}"


def completion_of(job: LlmJob) -> dict[str, Any]:
    """A completed job as a chat completion (thinking blocks are not shown: the API has no
    form for them)."""
    text, calls = _text_and_calls(job)
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": completion_id(job),
        "object": "chat.completion",
        "created": int(job.created_at.timestamp()),
        "model": model_of(job),
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason(job), "logprobs": None}
        ],
        "usage": usage_of(job),
    }


def sse_data(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def chunk(
    job: LlmJob,
    model: str,
    delta: dict[str, Any] | None,
    *,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    with_usage: bool = False,
) -> bytes:
    """One ``chat.completion.chunk``; ``delta`` None: the usage chunk (no choices)."""
    data: dict[str, Any] = {
        "id": completion_id(job),
        "object": "chat.completion.chunk",
        "created": int(job.created_at.timestamp()),
        "model": model,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    if with_usage:
        data["usage"] = usage
    return sse_data(data)


def tail_chunks(job: LlmJob, *, given: str, with_usage: bool) -> list[bytes]:
    """The end of a stream once the job completed: the text not given yet, the tool calls, the
    finish reason, the usage chunk when asked (with the job's id and cost, ``llmops``, which
    the SDK ignores), ``[DONE]``."""
    text, calls = _text_and_calls(job)
    model = model_of(job)
    out = []
    if text[len(given) :]:
        out.append(chunk(job, model, {"content": text[len(given) :]}, with_usage=with_usage))
    if calls:
        indexed = [{"index": i, **call} for i, call in enumerate(calls)]
        out.append(chunk(job, model, {"tool_calls": indexed}, with_usage=with_usage))
    out.append(chunk(job, model, {}, finish=finish_reason(job), with_usage=with_usage))
    if with_usage:
        data = json.loads(chunk(job, model, None, usage=usage_of(job), with_usage=True)[6:])
        data["llmops"] = {"job_id": str(job.id), "cost_usd": str(job.cost_usd)}
        out.append(sse_data(data))
    out.append(sse_data("[DONE]"))
    return out


def error_chunk(error: GatewayError) -> bytes:
    """An error inside a stream that has started (the SDK raises ``APIError``)."""
    return sse_data(error_body(error))


# --- Embeddings ---------------------------------------------------------------------------------


def embeddings_answer(
    job: LlmJob, vectors: list[list[float]], encoded: list[bytes] | None
) -> dict[str, Any]:
    """The answer of an embedding job: each vector as numbers, or as base64 of its float32
    bytes (``encoded``)."""
    prompt = job.input_tokens or 0
    return {
        "object": "list",
        "data": [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(encoded[i]).decode() if encoded else vector,
            }
            for i, vector in enumerate(vectors)
        ],
        "model": model_of(job),
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
    }
