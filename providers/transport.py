"""What a call that broke below HTTP means: a request that never left (safe to retry) or one
whose outcome is unknown (maybe billed). Both SDKs (anthropic, openai) wrap the same httpx2
errors in exceptions of their own; each passes its classes in."""

import time

import httpx2
from django.conf import settings

from providers.base import ProviderOutcome
from providers.call_deadline import CallDeadline

__all__ = ["transport_failure"]

_NEVER_LEFT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)


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
