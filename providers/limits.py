"""The Anthropic Messages API's limits on one non-streaming call: its read timeout and
deadline, each scaled from ``max_tokens``, and the largest ``max_tokens`` it accepts.

A non-streaming Messages call sends nothing until the whole answer is ready, so the read timeout
must cover the generation itself. The anthropic SDK expects up to an hour for 128,000 output
tokens and refuses non-streaming calls expected to run past ten minutes; we use the same
expectation, so every ``max_tokens`` we accept gets a read timeout long enough to finish, and we
refuse at submit what the SDK would refuse at call time.

A read timeout only bounds the time between two bytes; the call's deadline bounds the whole call
(providers/call_deadline.py), and the RQ job timeout stays above it (jobs/timeouts.py).
"""

import math

from django.conf import settings

__all__ = [
    "MAX_NONSTREAMING_SECONDS",
    "SECONDS_PER_OUTPUT_TOKEN",
    "call_deadline_for",
    "max_nonstreaming_tokens",
    "read_timeout_for",
]

SECONDS_PER_OUTPUT_TOKEN = 60 * 60 / 128_000
"""The SDK's expectation (``_calculate_nonstreaming_timeout``): an hour per 128k tokens."""
MAX_NONSTREAMING_SECONDS = 60 * 10
"""The SDK refuses a non-streaming call expected to take longer than ten minutes."""


def max_nonstreaming_tokens() -> int:
    """The largest ``max_tokens`` a non-streaming call accepts: 21,333 with the SDK's figures."""
    return math.floor(MAX_NONSTREAMING_SECONDS / SECONDS_PER_OUTPUT_TOKEN)


def read_timeout_for(max_tokens: int) -> float:
    """The read timeout of one call: its expected generation time, never below the configured
    floor (``LLM_PROVIDER_READ_TIMEOUT``), never above the ten-minute non-streaming limit."""
    expected = max_tokens * SECONDS_PER_OUTPUT_TOKEN * settings.LLM_READ_TIMEOUT_SCALE
    return min(float(MAX_NONSTREAMING_SECONDS), max(settings.LLM_PROVIDER_READ_TIMEOUT, expected))


def call_deadline_for(max_tokens: int) -> float:
    """The wall-clock deadline of one call, from connect to its last byte: the connect timeout
    plus the read timeout, since a non-streaming answer comes whole once generated. A call
    still running then is cut off and booked as an unknown outcome."""
    return settings.LLM_PROVIDER_CONNECT_TIMEOUT + read_timeout_for(max_tokens)
