"""What a provider answer's headers tell: its limits, when to come back, and how long the
limiter pauses after a 429.

The Messages API sends on every answer, success or error, for each limit that applies:
``anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-{limit,remaining,reset}``
(reset: RFC 3339, when the limit is fully replenished), and ``retry-after`` (seconds) on a 429.
An OpenAI-compatible API sends ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` instead
(reset: a duration such as ``6m0s`` or ``20ms``; tokens: input and output together), read into the
same kinds (``requests``, ``tokens``), its resets counted from the answer's ``Date``.
A reset is a time on the provider's clock: it is read against the answer's own ``Date`` header,
never against ours (a worker whose clock is off by a minute would pause a minute too long, or
not at all).
"""

import math
import re
import time
from collections.abc import Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = [
    "DEFAULT_PAUSE_SECONDS",
    "KINDS",
    "MAX_PAUSE_SECONDS",
    "learned_from_headers",
    "pause_after_429",
    "rate_limit_headers",
    "retry_after_seconds",
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


def retry_after_seconds(headers: Any) -> float | None:
    """The answer's ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date), in
    seconds; None without one."""
    if value := headers.get("retry-after-ms"):
        try:
            return float(value) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def rate_limit_headers(headers: Any) -> dict[str, str]:
    """The answer's headers the limiter reads (``learned_from_headers``, ``pause_after_429``):
    every ``anthropic-ratelimit-*``, and ``Date``, since a reset is read against the provider's
    clock, not ours."""
    return {
        k: v
        for k, v in headers.items()
        if k.lower().startswith(("anthropic-ratelimit-", "x-ratelimit-")) or k.lower() == "date"
    }


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def _duration_ms(value: str | None) -> int | None:
    """An OpenAI-style duration (``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s``) in ms; None if bad."""
    text = (value or "").strip()
    if not text:
        return None
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return int(sum(float(number) * _UNIT_MS[unit] for number, unit in parts))


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


def _date_ms(value: str | None) -> int:
    """The HTTP ``Date`` header (RFC 9110: whole seconds) in epoch ms; 0 when absent or bad."""
    if not value:
        return 0
    try:
        return int(parsedate_to_datetime(value.strip()).timestamp() * 1000)
    except (TypeError, ValueError):
        return 0


def learned_from_headers(
    headers: Mapping[str, str], *, now: float | None = None
) -> dict[str, tuple[int, int, int]]:
    """{kind: (limit, remaining or -1, reset epoch ms or 0)} for every kind whose ``-limit``
    header is present and readable. With a ``Date`` header, each reset is moved onto our clock
    (``now``, default the time of this call): now + (reset - Date)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    date = _date_ms(lowered.get("date"))
    shift = 0 if not date else int((time.time() if now is None else now) * 1000) - date
    learned: dict[str, tuple[int, int, int]] = {}
    for kind in KINDS:
        prefix = f"anthropic-ratelimit-{kind.replace('_', '-')}"
        limit = _int(lowered.get(f"{prefix}-limit"))
        if limit is None or limit <= 0:
            continue
        remaining = _int(lowered.get(f"{prefix}-remaining"))
        reset = _epoch_ms(lowered.get(f"{prefix}-reset"))
        learned[kind] = (
            limit,
            -1 if remaining is None else max(0, remaining),
            reset + shift if reset else 0,
        )
    if "input_tokens" in learned or "output_tokens" in learned:
        learned.pop("tokens", None)
    base = date or int((time.time() if now is None else now) * 1000)
    for kind in ("requests", "tokens"):
        # OpenAI-compatible: the same limits, a reset given as a duration from the answer.
        limit = _int(lowered.get(f"x-ratelimit-limit-{kind}"))
        if kind in learned or limit is None or limit <= 0:
            continue
        remaining = _int(lowered.get(f"x-ratelimit-remaining-{kind}"))
        after = _duration_ms(lowered.get(f"x-ratelimit-reset-{kind}"))
        learned[kind] = (
            limit,
            -1 if remaining is None else max(0, remaining),
            base + after + shift if after is not None else 0,
        )
    return learned


def pause_after_429(*, retry_after: float | None, headers: Mapping[str, str]) -> float:
    """Seconds every worker waits after a rate-limit 429, always a duration the provider gave:
    its retry-after when it sends one, else the reset of a limit it reports spent less the
    answer's ``Date`` (both on its clock), else ``DEFAULT_PAUSE_SECONDS``."""
    if retry_after is not None:
        return min(MAX_PAUSE_SECONDS, max(0.0, retry_after))
    date = _date_ms({key.lower(): value for key, value in headers.items()}.get("date"))
    if not date:
        return DEFAULT_PAUSE_SECONDS  # a reset alone is a time on a clock we cannot read
    resets = [
        reset
        for _, remaining, reset in learned_from_headers(headers, now=date / 1000).values()
        if remaining == 0 and reset
    ]
    if resets:
        return min(MAX_PAUSE_SECONDS, max(0.0, math.ceil(min(resets) - date) / 1000))
    return DEFAULT_PAUSE_SECONDS
