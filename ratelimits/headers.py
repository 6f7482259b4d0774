"""What a provider answer tells the limiter: its limits, and how long to pause after a 429.

The Messages API sends on every answer, success or error, for each limit that applies:
``anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-{limit,remaining,reset}``
(reset: RFC 3339, when the limit is fully replenished), and ``retry-after`` (seconds) on a 429.
"""

import math
import time
from collections.abc import Mapping
from datetime import datetime

__all__ = [
    "DEFAULT_PAUSE_SECONDS",
    "KINDS",
    "MAX_PAUSE_SECONDS",
    "learned_from_headers",
    "pause_after_429",
]

KINDS = ("requests", "input_tokens", "output_tokens", "tokens")
"""The limits the provider reports; ``tokens`` (input and output together) is kept only when an
answer carries no input/output split (older API versions)."""

DEFAULT_PAUSE_SECONDS = 5.0
"""A 429 with neither retry-after nor a spent limit's reset pauses every worker this long: the
provider's limits refill continuously, so a few seconds frees room for some calls."""

MAX_PAUSE_SECONDS = 900.0
"""No single 429 pauses every worker longer than 15 minutes, whatever a header says: a stuck or
wrong header must not stop dispatch for hours (the retry policy still honours it per job)."""


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value.strip()))
    except ValueError:
        return None


def _epoch_ms(value: str | None) -> int:
    if not value:
        return 0
    try:
        return int(datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


def learned_from_headers(headers: Mapping[str, str]) -> dict[str, tuple[int, int, int]]:
    """{kind: (limit, remaining or -1, reset epoch ms or 0)} for every kind whose ``-limit``
    header is present and readable."""
    lowered = {key.lower(): value for key, value in headers.items()}
    learned: dict[str, tuple[int, int, int]] = {}
    for kind in KINDS:
        prefix = f"anthropic-ratelimit-{kind.replace('_', '-')}"
        limit = _int(lowered.get(f"{prefix}-limit"))
        if limit is None or limit <= 0:
            continue
        remaining = _int(lowered.get(f"{prefix}-remaining"))
        learned[kind] = (
            limit,
            -1 if remaining is None else max(0, remaining),
            _epoch_ms(lowered.get(f"{prefix}-reset")),
        )
    if "input_tokens" in learned or "output_tokens" in learned:
        learned.pop("tokens", None)
    return learned


def pause_after_429(
    *,
    retry_after: float | None,
    learned: Mapping[str, tuple[int, int, int]],
    now: float | None = None,
) -> float:
    """Seconds every worker waits after a rate-limit 429: the provider's retry-after when it
    sends one, else the reset of a limit it reports spent, else ``DEFAULT_PAUSE_SECONDS``."""
    if retry_after is not None:
        return min(MAX_PAUSE_SECONDS, max(0.0, retry_after))
    now_ms = (time.time() if now is None else now) * 1000
    resets = [reset for _, remaining, reset in learned.values() if remaining == 0 and reset]
    if resets:
        return min(MAX_PAUSE_SECONDS, max(0.0, math.ceil(min(resets) - now_ms) / 1000))
    return DEFAULT_PAUSE_SECONDS
