"""The limits of one streamed Messages API call: how long it may stay silent, and how long it may
last in all, scaled from ``max_tokens``.

Every call streams (providers/anthropic_sdk.py), so a byte arrives as soon as the provider has
one, and the provider sends ``ping`` events while it works. A call that sends nothing for
``LLM_STREAM_IDLE_SECONDS`` has stalled (a hung server, a self-hosted model that holds the
connection open): the idle bound is the read timeout of the call's sockets. A trickle of bytes
never trips it, so the whole call also has a wall-clock deadline (providers/call_deadline.py),
scaled from ``max_tokens``; the RQ job timeout stays above it (jobs/timeouts.py).

``max_tokens`` itself is bounded by the model's own output limit, kept beside its price
(``ModelPrice.max_output_tokens``): a stream has no ten-minute ceiling of its own.
"""

from django.conf import settings

__all__ = [
    "SECONDS_PER_OUTPUT_TOKEN",
    "call_deadline_for",
    "expected_generation_seconds",
    "read_timeout_for",
]

SECONDS_PER_OUTPUT_TOKEN = 60 * 60 / 128_000
"""The SDK's expectation of a generation's pace (``_calculate_nonstreaming_timeout``): an hour
per 128,000 output tokens."""


def expected_generation_seconds(max_tokens: int) -> float:
    """How long generating ``max_tokens`` is expected to take, at the SDK's pace."""
    return max_tokens * SECONDS_PER_OUTPUT_TOKEN


def read_timeout_for(max_tokens: int) -> float:
    """The read timeout of a streamed call, whatever its length: the idle bound. A stream that
    delivers nothing (not even a ``ping``) for that long is abandoned as an unknown outcome."""
    return float(settings.LLM_STREAM_IDLE_SECONDS)


def call_deadline_for(max_tokens: int) -> float:
    """The wall-clock deadline of one call, from connect to its last byte: the connect timeout
    plus the longer of the idle bound and ``LLM_CALL_DEADLINE_SCALE`` times the expected
    generation time (twice the SDK's pace by default: a slow model at its full ``max_tokens``
    still finishes). A call still running then is cut off and booked as an unknown outcome."""
    generation = expected_generation_seconds(max_tokens) * settings.LLM_CALL_DEADLINE_SCALE
    return settings.LLM_PROVIDER_CONNECT_TIMEOUT + max(
        float(settings.LLM_STREAM_IDLE_SECONDS), generation
    )
