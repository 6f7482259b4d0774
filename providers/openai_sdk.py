"""The OpenAI SDK boundary: one streamed Chat Completions call to an OpenAI-compatible endpoint
(OpenAI, Ollama, vLLM, LM Studio, a gateway) through the official ``openai`` package.

Only ``providers/openai_api.py`` imports this module, on a call. As with Anthropic's: the SDK
never retries (``max_retries=0``), the read timeout is the stream's idle bound, every call's
sockets are bounded by its deadline (providers/call_deadline.py), and the call reports what it
observed as a ``ProviderOutcome``, never raising for provider trouble. The body is translated at
this edge (providers/openai_translate.py).
"""

import array
import base64
import functools
import sys
import time
from typing import Any

import httpx2
import openai
from django.conf import settings

from providers.base import (
    ProviderOutcome,
    ProviderRequest,
    UnreadableResponse,
    streamed_output_bound,
)
from providers.call_deadline import CallDeadline, install
from providers.openai_translate import (
    Untranslatable,
    chat_request,
    output_content,
    stop_reason_of,
    usage_of,
)
from providers.ratelimit_headers import rate_limit_headers, retry_after_seconds
from providers.transport import transport_failure

__all__ = ["call", "embed", "get_client"]

NO_KEY = "no-key"
"""Sent as the bearer token when the provider names no key variable (a local Ollama or vLLM
accepts any, and the SDK refuses to build a client without one)."""

# The status an error inside a 200 stream stands for, by its ``code`` or ``type``.
_STATUS_OF_STREAM_ERROR = {
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "invalid_request_error": 400,
    "context_length_exceeded": 400,
    "server_error": 500,
    "overloaded": 503,
}


@functools.lru_cache(maxsize=16)
def get_client(base_url: str, api_key: str, read_timeout: float, connect_timeout: float) -> Any:
    client = openai.OpenAI(
        api_key=api_key or NO_KEY,
        base_url=base_url,
        max_retries=0,
        timeout=openai.Timeout(read_timeout, connect=connect_timeout),
    )
    install(client._client)
    return client


def _client_for(request: ProviderRequest, base_url: str, api_key: str) -> tuple[Any, Any]:
    """The process's client of this endpoint, and the call's timeouts (its idle bound)."""
    client = get_client(
        base_url,
        api_key,
        settings.LLM_STREAM_IDLE_SECONDS,
        settings.LLM_PROVIDER_CONNECT_TIMEOUT,
    )
    timeout = openai.Timeout(
        request.read_timeout or settings.LLM_STREAM_IDLE_SECONDS,
        connect=settings.LLM_PROVIDER_CONNECT_TIMEOUT,
    )
    return client, timeout


class _Reading:
    """What the stream delivered so far."""

    def __init__(self) -> None:
        self.response: Any = None
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, int] = {}
        self.streamed_bytes = 0
        self.request_id = ""

    def content(self) -> list[dict[str, Any]]:
        return output_content(
            "".join(self.text), [self.calls[index] for index in sorted(self.calls)]
        )

    def headers(self) -> Any:
        return self.response.headers if self.response is not None else {}

    def read(self, chunk: Any, on_text: Any) -> None:
        if chunk.usage is not None:
            self.usage = usage_of(chunk.usage)
        for choice in chunk.choices or ():
            delta = choice.delta
            if delta is not None and delta.content:
                self.text.append(delta.content)
                self.streamed_bytes += len(delta.content.encode())
                if on_text is not None:
                    on_text(delta.content)
            for call in (delta.tool_calls or ()) if delta is not None else ():
                slot = self.calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                if call.id:
                    slot["id"] = call.id
                if call.function is not None:
                    if call.function.name:
                        slot["name"] += call.function.name
                    if call.function.arguments:
                        slot["arguments"] += call.function.arguments
                        self.streamed_bytes += len(call.function.arguments.encode())
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason


def call(request: ProviderRequest, *, base_url: str, api_key: str) -> ProviderOutcome:
    """One streamed Chat Completions call; with a ``deadline``, it ends by then whatever the
    server sends, or at once when cancelled."""
    if request.deadline is None:
        return _call(request, base_url, api_key)
    with request.deadline:
        return _call(request, base_url, api_key)


def _call(request: ProviderRequest, base_url: str, api_key: str) -> ProviderOutcome:
    deadline = request.deadline
    if deadline is not None and deadline.cancelled:
        return ProviderOutcome(
            "cancelled", 0, message="Cancelled before the call was sent.", request_sent=False
        )
    try:
        arguments = chat_request(request.body)
    except Untranslatable as exc:
        return ProviderOutcome(
            "error_response",
            0,
            http_status=400,
            error_type="invalid_request_error",
            message=f"Not sent: this OpenAI-compatible provider cannot be asked {exc}",
            request_sent=False,
        )
    client, timeout = _client_for(request, base_url, api_key)
    started = time.monotonic()
    reading = _Reading()
    try:
        stream = client.chat.completions.create(
            **arguments,
            extra_headers={"Idempotency-Key": request.idempotency_key},
            timeout=timeout,
        )
        with stream:
            reading.response = stream.response
            reading.request_id = stream.response.headers.get("x-request-id", "")
            for chunk in stream:
                reading.read(chunk, request.on_text)
                if deadline is not None and deadline.cancelled:
                    break
    except openai.APIStatusError as exc:
        return _error_outcome(exc, started)
    except (openai.APIConnectionError, httpx2.TransportError) as exc:
        return _broken(_transport_failure(exc, started, deadline), reading, deadline, started)
    except openai.APIError as exc:
        # An error event inside the 200 stream: what streamed before it may be billed.
        return _stream_error_outcome(exc, started, reading)
    if deadline is not None and deadline.cancelled and reading.finish_reason is None:
        return _cancelled(started, reading)
    if reading.finish_reason is None:
        return _broken(
            ProviderOutcome(
                "connection_dropped",
                int((time.monotonic() - started) * 1000),
                message="The stream ended before a finish_reason: outcome unknown",
            ),
            reading,
            deadline,
            started,
        )
    headers = reading.headers()
    return ProviderOutcome(
        "success",
        int((time.monotonic() - started) * 1000),
        http_status=reading.response.status_code,
        request_id=reading.request_id,
        text="".join(reading.text),
        content=reading.content(),
        stop_reason=stop_reason_of(reading.finish_reason),
        usage=reading.usage,
        rate_limit_headers=rate_limit_headers(headers),
    )


def embed(request: ProviderRequest, *, base_url: str, api_key: str) -> ProviderOutcome:
    """One Embeddings call (not streamed: the answer is one JSON body), bounded by the same
    idle timeout and deadline as a chat call; the vectors come back in ``input`` order."""
    if request.deadline is None:
        return _embed(request, base_url, api_key)
    with request.deadline:
        return _embed(request, base_url, api_key)


def _embed(request: ProviderRequest, base_url: str, api_key: str) -> ProviderOutcome:
    deadline = request.deadline
    if deadline is not None and deadline.cancelled:
        return ProviderOutcome(
            "cancelled", 0, message="Cancelled before the call was sent.", request_sent=False
        )
    body = request.body
    client, timeout = _client_for(request, base_url, api_key)
    extra: dict[str, Any] = {}
    if body.get("dimensions") is not None:
        extra["dimensions"] = body["dimensions"]
    started = time.monotonic()
    try:
        raw = client.embeddings.with_raw_response.create(
            model=body["model"],
            input=list(body["input"]),
            encoding_format="base64",
            extra_headers={"Idempotency-Key": request.idempotency_key},
            timeout=timeout,
            **extra,
        )
        answer = raw.parse()
    except openai.APIStatusError as exc:
        return _error_outcome(exc, started)
    except (openai.APIConnectionError, httpx2.TransportError) as exc:
        outcome = _transport_failure(exc, started, deadline)
        if deadline is not None and deadline.cancelled:
            return ProviderOutcome(
                "cancelled",
                int((time.monotonic() - started) * 1000),
                message="Cancelled while the provider was answering; the call was closed.",
            )
        return outcome
    latency = int((time.monotonic() - started) * 1000)
    vectors = _in_input_order(answer.data or [], len(body["input"]))
    if len({len(v) for v in vectors}) > 1:
        raise UnreadableResponse(f"{len(vectors)} vectors of unequal lengths")
    usage = usage_of(answer.usage)
    return ProviderOutcome(
        "success",
        latency,
        http_status=raw.http_response.status_code,
        request_id=raw.headers.get("x-request-id", ""),
        stop_reason="",
        usage=usage,
        rate_limit_headers=rate_limit_headers(raw.headers),
        embeddings=vectors,
    )


def _in_input_order(rows: list[Any], inputs: int) -> list[bytes]:
    """The vectors of an answer, placed by their ``index``: exactly one for each of 0..n-1.
    Checking the count alone stored vectors against the wrong inputs when a server repeated an
    index (every vector at 0); such an answer is unreadable, like a 2xx that is not JSON."""
    placed: dict[int, Any] = {}
    for row in rows:
        index = getattr(row, "index", None)
        if isinstance(index, bool) or not isinstance(index, int):
            raise UnreadableResponse(f"an embedding whose index is {index!r}, not a number")
        if index in placed:
            raise UnreadableResponse(
                f"{len(rows)} vectors for {inputs} inputs: index {index} given twice"
            )
        placed[index] = row
    missing = sorted(set(range(inputs)) - set(placed))
    extra = sorted(set(placed) - set(range(inputs)))
    if missing or extra:
        raise UnreadableResponse(
            f"{len(rows)} vectors for {inputs} inputs: "
            + "; ".join(
                part
                for part in (
                    f"index {_listed(missing)} missing" if missing else "",
                    f"index {_listed(extra)} out of range" if extra else "",
                )
                if part
            )
        )
    return [_float32(placed[index].embedding) for index in range(inputs)]


def _listed(indices: list[int]) -> str:
    """A few indices for a message: "3", "3, 4, 5" or "3, 4, 5 and 97 more"."""
    shown = ", ".join(str(i) for i in indices[:3])
    return shown if len(indices) <= 3 else f"{shown} and {len(indices) - 3} more"


def _float32(embedding: Any) -> bytes:
    """A vector as float32 little-endian bytes: asked as base64 (that is those bytes), or a
    list of numbers from a server that answers floats whatever it is asked."""
    if isinstance(embedding, str):
        data = base64.b64decode(embedding)
        if len(data) % 4:
            raise UnreadableResponse("a base64 embedding is not a whole number of float32")
        return data
    vector = array.array("f", (float(x) for x in embedding))
    if sys.byteorder == "big":
        vector.byteswap()
    return vector.tobytes()


def _error_body(exc: openai.APIError) -> dict[str, Any]:
    return exc.body if isinstance(exc.body, dict) else {}


def _error_outcome(exc: openai.APIStatusError, started: float) -> ProviderOutcome:
    """A plain HTTP error before the stream: not billed."""
    body = _error_body(exc)
    message = body.get("message") if isinstance(body.get("message"), str) else None
    return ProviderOutcome(
        "error_response",
        int((time.monotonic() - started) * 1000),
        http_status=exc.status_code,
        request_id=exc.request_id or "",
        error_type=str(body.get("type") or ""),
        error_code=str(body.get("code") or ""),
        message=message or str(exc),
        retry_after=retry_after_seconds(exc.response.headers),
        rate_limit_headers=rate_limit_headers(exc.response.headers),
    )


def _stream_error_outcome(
    exc: openai.APIError, started: float, reading: _Reading
) -> ProviderOutcome:
    body = _error_body(exc)
    code, kind = str(body.get("code") or ""), str(body.get("type") or "")
    status = _STATUS_OF_STREAM_ERROR.get(code) or _STATUS_OF_STREAM_ERROR.get(kind, 500)
    return ProviderOutcome(
        "error_response",
        int((time.monotonic() - started) * 1000),
        http_status=status,
        request_id=reading.request_id,
        error_type=kind,
        error_code=code,
        message=f"{exc.message} (an error event inside the stream)",
        text="".join(reading.text),
        content=reading.content(),
        usage=reading.usage,
        output_tokens_bound=streamed_output_bound(reading.streamed_bytes),
        rate_limit_headers=rate_limit_headers(reading.headers()),
    )


def _transport_failure(
    exc: BaseException, started: float, deadline: CallDeadline | None = None
) -> ProviderOutcome:
    return transport_failure(
        exc,
        started,
        deadline,
        connection_error=openai.APIConnectionError,
        timeout_error=openai.APITimeoutError,
        stall="nothing",
    )


def _broken(
    outcome: ProviderOutcome, reading: _Reading, deadline: CallDeadline | None, started: float
) -> ProviderOutcome:
    """A stream that broke (stalled, dropped, cut off): what it streamed before. Its usage comes
    only at the end, so the ledger bounds the attempt (docs/architecture.md, "Streaming")."""
    if deadline is not None and deadline.cancelled:
        return _cancelled(started, reading)
    outcome.usage = reading.usage
    outcome.text, outcome.content = "".join(reading.text), reading.content()
    if reading.response is not None:
        outcome.request_id = reading.request_id
        outcome.http_status = reading.response.status_code
    return outcome


def _cancelled(started: float, reading: _Reading) -> ProviderOutcome:
    return ProviderOutcome(
        "cancelled",
        int((time.monotonic() - started) * 1000),
        http_status=reading.response.status_code if reading.response is not None else None,
        request_id=reading.request_id,
        message="Cancelled while the provider was answering; the stream was closed.",
        text="".join(reading.text),
        content=reading.content(),
        usage=reading.usage,
        # Not what streamed: the provider generates until it sees the close, and a worker
        # that reads behind it cannot tell how far it got (the mixed drill: 59 tokens streamed,
        # 720 billed). Booked up to max_tokens, as a broken stream is.
        output_tokens_bound=None,
        rate_limit_headers=rate_limit_headers(reading.headers()),
    )
