"""The Anthropic SDK boundary: one streamed Messages API call through the official anthropic SDK.

Only ``providers/anthropic_api.py`` imports this module, when a call is made or a worker warms
up: the SDK takes about two seconds of CPU to import, which no web process, loop or fake
provider should pay at start.

The SDK never retries (``max_retries=0``): retries are ours (jobs/retry_policy.py). The call
reports what it observed as a ``ProviderOutcome``; it never raises for provider trouble.
"""

import functools
import inspect
import logging
import time
from typing import Any

import anthropic
import httpx2
from django.conf import settings

from providers.base import (
    ProviderOutcome,
    ProviderRequest,
    UnreadableResponse,
    streamed_output_bound,
)
from providers.call_deadline import CallDeadline, install
from providers.ratelimit_headers import rate_limit_headers, retry_after_seconds
from providers.transport import transport_failure

__all__ = [
    "STATUS_OF_ERROR_TYPE",
    "call",
    "content_block_dict",
    "get_client",
    "message_usage",
    "warm_up",
]

logger = logging.getLogger(__name__)

# The key for the local fake provider; it only checks that some key is present.
FAKE_PROVIDER_KEY = "fake-local-key"


def get_client(
    base_url: str, read_timeout: float, connect_timeout: float, api_key: str | None = None
) -> anthropic.Anthropic:
    """The SDK client of one base URL and key (None: ``ANTHROPIC_API_KEY``; without one, the
    fake provider's key), built once. The key is resolved before the cache is asked, so the
    warm-up's client (no key argument) is the one the calls use (None passed)."""
    key = settings.ANTHROPIC_API_KEY if api_key is None else api_key
    return _client(base_url, read_timeout, connect_timeout, key or FAKE_PROVIDER_KEY)


@functools.lru_cache(maxsize=8)
def _client(
    base_url: str, read_timeout: float, connect_timeout: float, key: str
) -> anthropic.Anthropic:
    client = anthropic.Anthropic(
        api_key=key,
        base_url=base_url,
        max_retries=0,
        timeout=anthropic.Timeout(read_timeout, connect=connect_timeout),
    )
    # Every call's sockets wait at most until its deadline (providers/call_deadline.py).
    install(client._client)
    return client


# An answer as the Messages API gives it, every usage field included: parsing it once in the
# worker's main process builds what parsing a real answer needs (below).
_WARM_UP_ANSWER = {
    "id": "msg_warm_up",
    "type": "message",
    "role": "assistant",
    "model": "warm-up",
    "content": [{"type": "text", "text": ""}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "server_tool_use": None,
        "service_tier": "standard",
    },
}


@functools.cache
def warm_up() -> None:
    """Build, once in a worker's main process, what every call would otherwise build first
    (once per process: a forked work horse inherits it done).

    Each job of a forking worker runs in a work horse that inherits it; built there instead, it
    is paid by every job again. The client and its TLS context; the pydantic adapters the SDK
    makes (and caches) when it parses an answer, about 14 ms; the OpenTelemetry propagator it
    imports on its first request, about 6 ms. The client holds no connection yet, so no socket
    is shared across forks. Nothing here may stop a worker from starting: the last two reach
    into the SDK's internals, and an SDK that moved them only costs the time again
    (tests/jobs/test_provider_warm_up.py notices).
    """
    get_client(
        settings.ANTHROPIC_BASE_URL,
        settings.LLM_STREAM_IDLE_SECONDS,
        settings.LLM_PROVIDER_CONNECT_TIMEOUT,
    )
    anthropic.types.Message.model_validate(_WARM_UP_ANSWER)
    try:
        # What the SDK itself does with a 200's body (anthropic._response -> construct_type).
        from anthropic._models import construct_type

        construct_type(type_=anthropic.types.Message, value=_WARM_UP_ANSWER)
    except Exception:
        logger.warning("warm-up: the SDK's answer parsing could not be prepared", exc_info=True)
    try:
        _warm_up_stream_parsing()
    except Exception:
        logger.warning("warm-up: the SDK's stream parsing could not be prepared", exc_info=True)
    try:
        _keep_parsed_message_class()
    except Exception:
        logger.warning("warm-up: the SDK's snapshot class could not be kept", exc_info=True)
    try:
        from anthropic._tracing import trace_context_injector

        trace_context_injector()
    except Exception:
        logger.warning("warm-up: the SDK's trace propagator could not be loaded", exc_info=True)


# Strong references to the SDK's parametrized snapshot class (``_keep_parsed_message_class``).
_KEPT_CLASSES: list[type] = []


def _keep_parsed_message_class() -> None:
    """The SDK's stream accumulator writes ``ParsedMessage[ResponseFormatT]`` at every
    ``message_start``; pydantic keeps a parametrized class only while something references it,
    so each call built the class anew (0.5 ms of CPU alone, several under load). One reference,
    made with the accumulator's own type variable, makes it a cache hit."""
    from anthropic.lib.streaming import _messages as accumulator

    generic: Any = accumulator.ParsedMessage  # a runtime subscript, not an annotation
    _KEPT_CLASSES.append(generic[accumulator.ResponseFormatT])


def _warm_up_stream_parsing() -> None:
    """Read a canned stream (every event a streamed answer has, each content block kind) through
    the SDK's own ``Stream`` and ``MessageStream``, as a real call reads one."""
    import json

    from anthropic.lib.streaming import MessageStream
    from anthropic.types import RawMessageStreamEvent

    start = {**_WARM_UP_ANSWER, "content": [], "stop_reason": None}
    blocks = [
        ({"type": "text", "text": ""}, {"type": "text_delta", "text": "x"}),
        ({"type": "thinking", "thinking": "", "signature": ""},
         {"type": "thinking_delta", "thinking": "x"}),
        ({"type": "tool_use", "id": "toolu_warm_up", "name": "warm_up", "input": {}},
         {"type": "input_json_delta", "partial_json": "{}"}),
    ]  # fmt: skip
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, (block, delta) in enumerate(blocks):
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index,
                                     "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": index,
                                     "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]  # fmt: skip
    events += [
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                 "delta": {"type": "signature_delta", "signature": "x"}}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    request = httpx2.Request("POST", "http://warm-up.invalid/v1/messages")
    response = httpx2.Response(
        200,
        content=body.encode(),
        headers={"content-type": "text/event-stream"},
        request=request,
    )
    client = get_client(
        settings.ANTHROPIC_BASE_URL,
        settings.LLM_STREAM_IDLE_SECONDS,
        settings.LLM_PROVIDER_CONNECT_TIMEOUT,
    )
    # RawMessageStreamEvent is an annotated union, which is what the SDK itself passes.
    event_type: Any = RawMessageStreamEvent
    raw: anthropic.Stream[Any] = anthropic.Stream(
        cast_to=event_type, response=response, client=client
    )
    for _ in MessageStream(raw, output_format=anthropic.NOT_GIVEN):
        pass


def message_usage(usage: Any) -> dict[str, int]:
    """A Message's ``usage`` as ``ProviderOutcome.usage`` keeps it (the ledger's token kinds)."""
    cache_creation = getattr(usage, "cache_creation", None)
    total_creation = usage.cache_creation_input_tokens or 0
    one_hour = (
        (getattr(cache_creation, "ephemeral_1h_input_tokens", 0) or 0) if cache_creation else 0
    )
    server_tools = getattr(usage, "server_tool_use", None)
    return {
        "web_search_requests": (getattr(server_tools, "web_search_requests", 0) or 0)
        if server_tools
        else 0,
        "input_tokens": usage.input_tokens or 0,
        "output_tokens": usage.output_tokens or 0,
        # Without the split, the provider wrote with its default ttl of five minutes.
        "cache_write_5m_tokens": max(0, total_creation - one_hour),
        "cache_write_1h_tokens": one_hour,
        "cache_read_tokens": usage.cache_read_input_tokens or 0,
    }


def _transport_failure(
    exc: BaseException, started: float, deadline: CallDeadline | None = None
) -> ProviderOutcome:
    return transport_failure(
        exc,
        started,
        deadline,
        connection_error=anthropic.APIConnectionError,
        timeout_error=anthropic.APITimeoutError,
        stall="nothing (not even a ping)",
    )


@functools.cache
def _sdk_parameters() -> frozenset[str]:
    """The body fields the pinned SDK's ``messages.stream`` takes by name."""
    from anthropic.resources.messages import Messages

    return frozenset(inspect.signature(Messages.stream).parameters) - {"self"}


def _split_body(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body as the SDK's named arguments, and the rest (``temperature``, ``top_p``,
    ``top_k`` are not named by this SDK) as ``extra_body``: the provider gets every field as
    the job gave it, whichever fields an SDK release names."""
    named = _sdk_parameters()
    return (
        {k: v for k, v in body.items() if k in named and k != "stream"},
        {k: v for k, v in body.items() if k not in named and k != "stream"},
    )


# The HTTP status an error event inside a 200 stream (or an errored batch item) stands for.
STATUS_OF_ERROR_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class _Reading:
    """What a stream delivered so far: the message as it grows, and its bytes of output."""

    def __init__(self) -> None:
        self.stream: Any = None
        self.streamed_bytes = 0
        self.complete = False

    def snapshot(self) -> Any:
        return self.stream._current_snapshot_or_none() if self.stream is not None else None

    def usage(self) -> dict[str, int]:
        message = self.snapshot()
        return message_usage(message.usage) if message is not None else {}

    def content(self) -> list[dict[str, Any]]:
        message = self.snapshot()
        if message is None:
            return []
        return [content_block_dict(block) for block in message.content]

    def text(self) -> str:
        message = self.snapshot()
        if message is None:
            return ""
        return "".join(block.text for block in message.content if block.type == "text")

    def headers(self) -> Any:
        return self.stream.response.headers if self.stream is not None else {}


def content_block_dict(block: Any) -> dict[str, Any]:
    """A content block of a Message as the API returned it."""
    dumped: dict[str, Any] = block.model_dump(mode="json", exclude_unset=True)
    # The SDK's parsed text blocks carry a ``parsed_output`` of their own; the API's do not.
    dumped.pop("parsed_output", None)
    return dumped


def _delta_bytes(delta: Any) -> int:
    kind = delta.type
    if kind == "text_delta":
        return len(delta.text.encode())
    if kind == "thinking_delta":
        return len(delta.thinking.encode())
    if kind == "input_json_delta":
        return len(delta.partial_json.encode())
    return 0


def call(
    request: ProviderRequest, *, base_url: str = "", api_key: str | None = None
) -> ProviderOutcome:
    """One streamed Messages API call; with a ``deadline``, it ends by then whatever the
    provider sends, or at once when cancelled (providers/call_deadline.py). ``base_url`` empty:
    ``ANTHROPIC_BASE_URL``; ``api_key`` None: ``ANTHROPIC_API_KEY``."""
    if request.deadline is None:
        return _call(request, base_url, api_key)
    with request.deadline:
        return _call(request, base_url, api_key)


def _call(request: ProviderRequest, base_url: str, api_key: str | None) -> ProviderOutcome:
    """One streamed Messages call. The read timeout is the stream's idle bound: the API sends
    ``ping`` events while it works, so a socket silent that long has stalled (the SDK swallows
    the pings, so the bound sits at the socket, not on parsed events)."""
    client = get_client(
        base_url or settings.ANTHROPIC_BASE_URL,
        settings.LLM_STREAM_IDLE_SECONDS,
        settings.LLM_PROVIDER_CONNECT_TIMEOUT,
        api_key,
    )
    timeout = anthropic.Timeout(
        request.read_timeout or settings.LLM_STREAM_IDLE_SECONDS,
        connect=settings.LLM_PROVIDER_CONNECT_TIMEOUT,
    )
    named, extra = _split_body(request.body)
    deadline = request.deadline
    started = time.monotonic()
    if deadline is not None and deadline.cancelled:
        return ProviderOutcome(
            "cancelled", 0, message="Cancelled before the call was sent.", request_sent=False
        )
    reading = _Reading()
    try:
        with client.messages.stream(
            **named,
            extra_body=extra or None,
            extra_headers={"Idempotency-Key": request.idempotency_key},
            timeout=timeout,
        ) as stream:
            reading.stream = stream
            for event in stream:
                if event.type == "content_block_delta":
                    reading.streamed_bytes += _delta_bytes(event.delta)
                    if event.delta.type == "text_delta" and request.on_text is not None:
                        request.on_text(event.delta.text)
                elif event.type == "message_stop":
                    reading.complete = True
                if deadline is not None and deadline.cancelled:
                    break
    except anthropic.APIStatusError as exc:
        return _error_outcome(exc, started, reading, deadline)
    except (anthropic.APIConnectionError, httpx2.TransportError) as exc:
        return _broken(_transport_failure(exc, started, deadline), reading, deadline, started)
    except anthropic.APIResponseValidationError as exc:
        raise UnreadableResponse(f"a stream event that is not the Messages API's: {exc}") from exc
    if deadline is not None and deadline.cancelled and not reading.complete:
        return _cancelled(started, reading)
    if reading.snapshot() is None and "text/event-stream" not in (
        reading.headers().get("content-type", "") if reading.stream is not None else ""
    ):
        # A 200 that is no stream at all (a proxy's HTML page): say so plainly; the runner
        # books the attempt as an unexpected error and retries it.
        headers = reading.headers()
        raise UnreadableResponse(
            f"HTTP {stream.response.status_code} with a body that is not a Messages API answer "
            f"(content-type {headers.get('content-type', 'unknown')}, "
            f"request-id {headers.get('request-id', 'none')})"
        )
    if not reading.complete or reading.snapshot() is None:
        # The connection ended cleanly without a message_stop: the answer is cut short.
        return _broken(
            ProviderOutcome(
                "connection_dropped",
                int((time.monotonic() - started) * 1000),
                message="The stream ended before message_stop: outcome unknown",
            ),
            reading,
            deadline,
            started,
        )
    message = reading.snapshot()
    headers = reading.headers()
    return ProviderOutcome(
        "success",
        int((time.monotonic() - started) * 1000),
        http_status=stream.response.status_code,
        request_id=headers.get("request-id", ""),
        text=reading.text(),
        content=reading.content(),
        stop_reason=message.stop_reason or "",
        usage=message_usage(message.usage),
        rate_limit_headers=rate_limit_headers(headers),
    )


COUNTED_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking")
"""The fields of a Messages body the token count reads (it takes no ``max_tokens``)."""


def count_tokens(
    body: dict[str, Any], *, base_url: str = "", api_key: str | None = None
) -> ProviderOutcome:
    """The API's count of a Messages body's input tokens (free, no job): a success outcome whose
    usage has ``input_tokens``, or the error it answered. Never raises for provider trouble."""
    client = get_client(
        base_url or settings.ANTHROPIC_BASE_URL,
        settings.LLM_STREAM_IDLE_SECONDS,
        settings.LLM_PROVIDER_CONNECT_TIMEOUT,
        api_key,
    )
    started = time.monotonic()
    try:
        counted = client.messages.count_tokens(
            **{name: body[name] for name in COUNTED_FIELDS if body.get(name) is not None}
        )
    except anthropic.APIStatusError as exc:
        return _error_outcome(exc, started, _Reading(), None)
    except (anthropic.APIConnectionError, httpx2.TransportError) as exc:
        return _transport_failure(exc, started)
    return ProviderOutcome(
        "success",
        int((time.monotonic() - started) * 1000),
        http_status=200,
        usage={"input_tokens": int(counted.input_tokens)},
    )


def _error_outcome(
    exc: anthropic.APIStatusError,
    started: float,
    reading: _Reading,
    deadline: CallDeadline | None,
) -> ProviderOutcome:
    """An error answer: before the stream (a plain HTTP error, not billed), or an ``error``
    event inside a 200 stream (its input and what streamed may be billed)."""
    in_stream = exc.status_code < 400
    status = STATUS_OF_ERROR_TYPE.get(exc.type or "", 500) if in_stream else exc.status_code
    outcome = ProviderOutcome(
        "error_response",
        int((time.monotonic() - started) * 1000),
        http_status=status,
        request_id=exc.request_id or "",
        error_type=exc.type or "",
        error_code=exc.error_code or "",
        message=(exc.api_message or str(exc))
        + (" (an error event inside the stream)" if in_stream else ""),
        retry_after=retry_after_seconds(exc.response.headers),
        rate_limit_headers=rate_limit_headers(exc.response.headers),
    )
    if in_stream:
        # The error came in-band: everything generated before it was read.
        outcome.usage = reading.usage()
        outcome.text, outcome.content = reading.text(), reading.content()
        outcome.output_tokens_bound = streamed_output_bound(reading.streamed_bytes)
    return outcome


def _broken(
    outcome: ProviderOutcome, reading: _Reading, deadline: CallDeadline | None, started: float
) -> ProviderOutcome:
    """A stream that broke (stalled, dropped, cut off): what it said of its usage before."""
    if deadline is not None and deadline.cancelled:
        return _cancelled(started, reading)
    outcome.usage = reading.usage()
    outcome.text, outcome.content = reading.text(), reading.content()
    headers = reading.headers()
    if headers:
        outcome.request_id = headers.get("request-id", "")
        outcome.http_status = reading.stream.response.status_code
    return outcome


def _cancelled(started: float, reading: _Reading) -> ProviderOutcome:
    """Cancelled mid-call: the connection is closed, so the provider stops generating once it
    sees the close; what it generated until then is bounded only by ``max_tokens``."""
    headers = reading.headers()
    return ProviderOutcome(
        "cancelled",
        int((time.monotonic() - started) * 1000),
        http_status=reading.stream.response.status_code if reading.stream is not None else None,
        request_id=headers.get("request-id", "") if headers else "",
        message="Cancelled while the provider was answering; the stream was closed.",
        text=reading.text(),
        content=reading.content(),
        usage=reading.usage(),
        # Not what streamed: the provider generates until it sees the close, and a worker
        # that reads behind it cannot tell how far it got (the mixed drill: 59 tokens streamed,
        # 720 billed). Booked up to max_tokens, as a broken stream is.
        output_tokens_bound=None,
        rate_limit_headers=rate_limit_headers(headers) if headers else {},
    )
