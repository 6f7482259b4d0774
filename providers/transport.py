"""What a call that broke below HTTP means: a request that never left (safe to retry) or one
whose outcome is unknown (maybe billed). Both SDKs (anthropic, openai) wrap the same httpx2
errors in exceptions of their own; each passes its classes in."""

import time
from typing import Any

import httpx2
from django.conf import settings

from providers.base import ProviderOutcome
from providers.call_deadline import CallDeadline

__all__ = ["endpoint_of", "transport_failure"]

_NEVER_LEFT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint_of(url: Any) -> str:
    """``host:port`` of a URL (``[::1]:8080`` for IPv6): what an operator needs to find an
    unreachable provider, without the path, query or user info, where a gateway's URL may
    carry a token."""
    url = httpx2.URL(str(url))
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = url.port or _DEFAULT_PORTS.get(url.scheme)
    return f"{host}:{port}" if port else host


def _endpoint_tried(*errors: BaseException | None) -> str | None:
    """The endpoint of the request an SDK or httpx2 error carries, if any does."""
    for error in errors:
        try:
            request = getattr(error, "request", None)
        except RuntimeError:  # httpx2's errors raise when no request was attached
            request = None
        if request is not None:
            return endpoint_of(request.url)
    return None


def _never_left(cause: BaseException, endpoint: str | None) -> str:
    """Why a request never left, naming where it was going: "ConnectError: could not connect
    to 127.0.0.1:9 ([Errno 111] Connection refused)". The socket's own words carry no URL."""
    name = type(cause).__name__
    where = endpoint or "the provider"
    if isinstance(cause, httpx2.ConnectTimeout):
        what = f"connecting to {where} timed out"
    elif isinstance(cause, httpx2.PoolTimeout):
        what = f"no free connection to {where} in the client's pool"
    else:
        what = f"could not connect to {where}"
    reason = str(cause).strip()
    return f"{name}: {what}" + (f" ({reason})" if reason else "")


def transport_failure(
    exc: BaseException,
    started: float,
    deadline: CallDeadline | None,
    *,
    connection_error: type[BaseException],
    timeout_error: type[BaseException],
    stall: str = "nothing",
) -> ProviderOutcome:
    """The outcome of ``exc``, raised by an SDK whose connection and timeout errors are
    ``connection_error`` and ``timeout_error``. ``stall`` says what a stalled stream did not
    send ("nothing (not even a ping)" where the API pings while it works)."""
    cause = exc.__cause__ if isinstance(exc, connection_error) else exc
    latency = int((time.monotonic() - started) * 1000)
    if isinstance(cause, _NEVER_LEFT):
        return ProviderOutcome(
            "connection_error", latency, message=_never_left(cause, _endpoint_tried(exc, cause))
        )
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
    if isinstance(exc, timeout_error) or isinstance(cause, httpx2.TimeoutException):
        return ProviderOutcome(
            "read_timeout",
            latency,
            message=(
                f"Stream stalled: {stall} for {settings.LLM_STREAM_IDLE_SECONDS:g} s "
                "(LLM_STREAM_IDLE_SECONDS): outcome unknown"
            ),
        )
    return ProviderOutcome(
        "connection_dropped",
        latency,
        message=f"Connection lost mid-request ({type(cause).__name__}): outcome unknown",
    )
