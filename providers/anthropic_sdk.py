"""The Anthropic provider: one Messages API call through the official anthropic SDK.

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

from providers import limits
from providers.base import ProviderOutcome, ProviderRequest, UnreadableResponse
from providers.call_deadline import CallDeadline, install
from providers.ratelimit_headers import rate_limit_headers, retry_after_seconds

__all__ = ["AnthropicProvider", "get_client", "warm_up"]

logger = logging.getLogger(__name__)

# The key for the local fake provider; it only checks that some key is present.
FAKE_PROVIDER_KEY = "fake-local-key"


class AnthropicProvider:
    """The Messages API (``ANTHROPIC_BASE_URL``: the real one, or the fake provider)."""

    name = "anthropic"

    def call(self, request: ProviderRequest) -> ProviderOutcome:
        """One Messages API call; with a ``deadline``, it ends by then whatever the provider
        sends (providers/call_deadline.py)."""
        if request.deadline is None:
            return _call(request)
        with request.deadline:
            return _call(request)

    def warm_up(self) -> None:
        warm_up()

    def max_tokens_limit(self) -> int:
        return limits.max_nonstreaming_tokens()

    def read_timeout_for(self, max_tokens: int) -> float:
        return limits.read_timeout_for(max_tokens)

    def call_deadline_for(self, max_tokens: int) -> float:
        return limits.call_deadline_for(max_tokens)


@functools.lru_cache(maxsize=8)
def get_client(base_url: str, read_timeout: float, connect_timeout: float) -> anthropic.Anthropic:
    client = anthropic.Anthropic(
        api_key=settings.ANTHROPIC_API_KEY or FAKE_PROVIDER_KEY,
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


def warm_up() -> None:
    """Build, once in a worker's main process, what every call would otherwise build first.

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
        settings.LLM_PROVIDER_READ_TIMEOUT,
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
        from anthropic._tracing import trace_context_injector

        trace_context_injector()
    except Exception:
        logger.warning("warm-up: the SDK's trace propagator could not be loaded", exc_info=True)


def _usage(usage: Any) -> dict[str, int]:
    cache_creation = getattr(usage, "cache_creation", None)
    total_creation = usage.cache_creation_input_tokens or 0
    one_hour = (
        (getattr(cache_creation, "ephemeral_1h_input_tokens", 0) or 0) if cache_creation else 0
    )
    return {
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
    """Tell a request that never left (safe) from one whose outcome is unknown (maybe billed)."""
    cause = exc.__cause__ if isinstance(exc, anthropic.APIConnectionError) else exc
    latency = int((time.monotonic() - started) * 1000)
    if isinstance(cause, (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)):
        return ProviderOutcome("connection_error", latency, message=f"{type(cause).__name__}")
    if deadline is not None and (deadline.passed() or deadline.was_cut):
        # Booked as a read timeout (unknown outcome, upper bound), with its own message.
        return ProviderOutcome(
            "read_timeout",
            latency,
            message=(
                f"Deadline exceeded: the call was cut off after {latency / 1000:.1f} s (its "
                f"deadline: {deadline.seconds:g} s) while the provider was still sending: "
                "outcome unknown"
            ),
        )
    if isinstance(exc, anthropic.APITimeoutError) or isinstance(cause, httpx2.TimeoutException):
        return ProviderOutcome("read_timeout", latency, message="Read timeout: outcome unknown")
    return ProviderOutcome(
        "connection_dropped",
        latency,
        message=f"Connection lost mid-request ({type(cause).__name__}): outcome unknown",
    )


@functools.cache
def _sdk_parameters() -> frozenset[str]:
    """The body fields the pinned SDK's ``messages.create`` takes by name."""
    from anthropic.resources.messages import Messages

    return frozenset(inspect.signature(Messages.create).parameters) - {"self"}


def _split_body(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body as the SDK's named arguments, and the rest (``temperature``, ``top_p``,
    ``top_k`` are not named by this SDK) as ``extra_body``: the provider gets every field as
    the job gave it, whichever fields an SDK release names."""
    named = _sdk_parameters()
    return (
        {k: v for k, v in body.items() if k in named},
        {k: v for k, v in body.items() if k not in named},
    )


def _call(request: ProviderRequest) -> ProviderOutcome:
    client = get_client(
        settings.ANTHROPIC_BASE_URL,
        settings.LLM_PROVIDER_READ_TIMEOUT,
        settings.LLM_PROVIDER_CONNECT_TIMEOUT,
    )
    # Each call's read timeout is scaled from its max_tokens (providers/limits.py); one client.
    timeout = anthropic.Timeout(
        request.read_timeout or settings.LLM_PROVIDER_READ_TIMEOUT,
        connect=settings.LLM_PROVIDER_CONNECT_TIMEOUT,
    )
    named, extra = _split_body(request.body)
    started = time.monotonic()
    try:
        raw = client.messages.with_raw_response.create(
            **named,
            extra_body=extra or None,
            extra_headers={"Idempotency-Key": request.idempotency_key},
            timeout=timeout,
        )
        message = raw.parse()
    except anthropic.APIStatusError as exc:
        return ProviderOutcome(
            "error_response",
            int((time.monotonic() - started) * 1000),
            http_status=exc.status_code,
            request_id=exc.request_id or "",
            error_type=exc.type or "",
            error_code=exc.error_code or "",
            message=exc.api_message or str(exc),
            retry_after=retry_after_seconds(exc.response.headers),
            rate_limit_headers=rate_limit_headers(exc.response.headers),
        )
    except (anthropic.APIConnectionError, httpx2.TransportError) as exc:
        return _transport_failure(exc, started, request.deadline)
    if not isinstance(message, anthropic.types.Message):
        # The SDK hands back the raw text of a body that is not JSON (a proxy's HTML page): say
        # so plainly; the runner books the attempt as an unexpected error and retries it.
        raise UnreadableResponse(
            f"HTTP {raw.http_response.status_code} with a body that is not a Messages API answer "
            f"(content-type {raw.headers.get('content-type', 'unknown')}, "
            f"request-id {raw.headers.get('request-id', 'none')})"
        )
    text = "".join(block.text for block in message.content if block.type == "text")
    return ProviderOutcome(
        "success",
        int((time.monotonic() - started) * 1000),
        http_status=raw.http_response.status_code,
        request_id=raw.headers.get("request-id", ""),
        text=text,
        content=[block.model_dump(mode="json", exclude_unset=True) for block in message.content],
        stop_reason=message.stop_reason or "",
        usage=_usage(message.usage),
        rate_limit_headers=rate_limit_headers(raw.headers),
    )
