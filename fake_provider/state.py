"""In-process state of the fake provider: configuration, prices, prompt cache, rpm window, stats.

Everything here runs on the single asyncio loop of one uvicorn worker. No method awaits, so each
call is atomic with respect to other requests and no lock is needed.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

__all__ = [
    "FAULT_CODES",
    "PRICES",
    "Config",
    "FakeProviderState",
    "Price",
    "RateDecision",
    "format_rfc3339",
    "parse_fault",
    "parse_faults",
    "parse_latency",
    "parse_rpm",
    "price_for",
]

WINDOW_SECONDS = 60.0
DEFAULT_CACHE_TTL = "5m"
CACHE_TTLS = {"5m": 300.0, "1h": 3600.0}

FAULT_CODES = (
    "400", "401", "403", "404", "409", "413", "429", "500", "502", "503", "504", "529",
    "spendcap", "credit", "context", "usagelimit", "timeout", "drop", "garbage",
)  # fmt: skip


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal
    output: Decimal
    max_output_tokens: int


def _price(values: str, max_output_tokens: int) -> Price:
    inp, write_5m, write_1h, read, out = (Decimal(v) for v in values.split("/"))
    return Price(inp, write_5m, write_1h, read, out, max_output_tokens)


# The "provider's" own price list (input / 5-min write / 1-hour write / cache read / output).
PRICES: dict[str, Price] = {
    "claude-opus-4-6": _price("5/6.25/10/0.50/25", 128_000),
    "claude-opus-4-5": _price("5/6.25/10/0.50/25", 64_000),
    "claude-opus-4-1": _price("15/18.75/30/1.50/75", 32_000),
    "claude-sonnet-4-6": _price("3/3.75/6/0.30/15", 64_000),
    "claude-sonnet-4-5": _price("3/3.75/6/0.30/15", 64_000),
    "claude-sonnet-4": _price("3/3.75/6/0.30/15", 64_000),
    "claude-haiku-4-5": _price("1/1.25/2/0.10/5", 64_000),
}
_DATED = re.compile(r"^(.*)-\d{8}$")


def price_for(model: str) -> Price | None:
    """The price of a model id, also for dated ids such as claude-sonnet-4-5-20250929."""
    if model in PRICES:
        return PRICES[model]
    match = _DATED.match(model)
    return PRICES.get(match.group(1)) if match else None


def format_rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- option parsing (shared by the command line and the control endpoint) ----------------------


def parse_latency(value: Any) -> tuple[int, int]:
    """50 or "50" -> (50, 50); "20-400" or (20, 400) -> (20, 400) milliseconds; or ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"latency must be MS or MIN-MAX milliseconds, not {value!r}")
    if isinstance(value, int):
        low = high = value
    elif (
        isinstance(value, (tuple, list)) and len(value) == 2 and all(type(v) is int for v in value)
    ):
        low, high = value
    else:
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(value))
        if not match:
            raise ValueError(f"latency must be MS or MIN-MAX milliseconds, not {value!r}")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
    if low < 0 or high < low:
        raise ValueError(f"latency range must satisfy 0 <= MIN <= MAX, not {value!r}")
    if high > 600_000:
        raise ValueError(f"latency must be at most 600000 ms, not {value!r}")
    return low, high


def parse_rpm(value: Any) -> int | None:
    """A positive integer, or None / 0 for no limit. Raises ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"rpm must be a positive integer, not {value!r}")
    try:
        rpm = int(value)
    except ValueError:
        raise ValueError(f"rpm must be a positive integer, not {value!r}") from None
    if rpm < 0:
        raise ValueError(f"rpm must be a positive integer, not {value!r}")
    return rpm or None


def _rate(code: str, rate: Any) -> float:
    if code not in FAULT_CODES:
        raise ValueError(f"unknown fault code {code!r}; known: {', '.join(FAULT_CODES)}")
    if isinstance(rate, bool):
        raise ValueError(f"fault rate for {code} must be a number in 0..1, not {rate!r}")
    try:
        value = float(rate)
    except (TypeError, ValueError):
        raise ValueError(f"fault rate for {code} must be a number in 0..1, not {rate!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"fault rate for {code} must be a number in 0..1, not {rate!r}")
    return value


def parse_fault(spec: str) -> tuple[str, float]:
    """ "529:0.2" -> ("529", 0.2). Raises ValueError."""
    code, sep, rate = spec.strip().partition(":")
    if not sep:
        raise ValueError(f"fault must be CODE:RATE (e.g. 529:0.2), not {spec!r}")
    code = code.strip().lower()
    return code, _rate(code, rate.strip())


def parse_faults(
    faults: Mapping[str, Any] | Iterable[tuple[str, Any]],
) -> tuple[tuple[str, float], ...]:
    """Ordered, validated (code, rate) pairs; a repeated code keeps its last rate."""
    items = faults.items() if isinstance(faults, Mapping) else faults
    merged: dict[str, float] = {}
    for code, rate in items:
        code = str(code).strip().lower()
        merged.pop(code, None)
        merged[code] = _rate(code, rate)
    return tuple((code, rate) for code, rate in merged.items() if rate > 0)


@dataclass(frozen=True)
class Config:
    faults: tuple[tuple[str, float], ...] = ()
    latency_ms: tuple[int, int] = (0, 0)
    rpm: int | None = None

    def describe(self) -> dict[str, Any]:
        low, high = self.latency_ms
        return {
            "faults": dict(self.faults),
            "latency_ms": str(low) if low == high else f"{low}-{high}",
            "rpm": self.rpm,
        }

    def faults_text(self) -> str:
        return ",".join(f"{code}:{rate:g}" for code, rate in self.faults) or "none"


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    limit: int
    remaining: int
    reset: str
    retry_after: int

    def headers(self) -> list[tuple[str, str]]:
        return [
            ("anthropic-ratelimit-requests-limit", str(self.limit)),
            ("anthropic-ratelimit-requests-remaining", str(self.remaining)),
            ("anthropic-ratelimit-requests-reset", self.reset),
        ]


_TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


class FakeProviderState:
    """Configuration, counters, prompt-cache memory and the rpm window of one fake provider."""

    def __init__(
        self,
        *,
        faults: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
        latency_ms: Any = 0,
        rpm: Any = None,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.start_config = Config(parse_faults(faults), parse_latency(latency_ms), parse_rpm(rpm))
        self.seed = seed
        self._clock = clock
        self._wall = wall_clock
        self.reset()

    # --- configuration ------------------------------------------------------------------------

    def reset(self) -> None:
        """Start configuration back; counters, cache memory, rpm window cleared; rng re-seeded."""
        # Requests still in flight across a reset belong to the old counters: they neither count
        # nor bill after it (a test's stats never include an earlier test's slow call).
        self.epoch = getattr(self, "epoch", 0) + 1
        self._persistent = self.start_config
        self._override: Config | None = None
        self._override_until: float | None = None
        self.rng = random.Random(self.seed)
        self._window: deque[float] = deque()
        self._cache: dict[tuple[str, str], float] = {}
        self.requests = 0
        self.by_status: dict[str, int] = {}
        self.dropped = 0
        self.timed_out = 0
        self.billed = dict.fromkeys(_TOKEN_FIELDS, 0)
        self.cost = Decimal(0)

    @property
    def config(self) -> Config:
        if self._override_until is not None and self._clock() >= self._override_until:
            self._override = self._override_until = None
        return self._override or self._persistent

    def update_config(self, config: Config, for_seconds: float | None = None) -> None:
        """Without for_seconds the change lasts until reset; with it the previous lasting
        configuration (the start configuration unless changed for good) comes back afterwards."""
        if for_seconds is None:
            self._persistent, self._override, self._override_until = config, None, None
        else:
            self._override, self._override_until = config, self._clock() + for_seconds

    def describe(self) -> dict[str, Any]:
        described = self.config.describe()
        left = (
            None if self._override_until is None else max(0.0, self._override_until - self._clock())
        )
        described["window_seconds_left"] = None if left is None else round(left, 3)
        described["seed"] = self.seed
        return described

    # --- draws ----------------------------------------------------------------------------------

    def draw_fault(self) -> str | None:
        """One uniform draw per request; each fault owns a slice of [0, 1) of its rate, in
        configured order (rates adding up to more than 1 cut the later ones)."""
        faults = self.config.faults
        if not faults:
            return None
        point, edge = self.rng.random(), 0.0
        for code, rate in faults:
            edge += rate
            if point < edge:
                return code
        return None

    def draw_latency(self) -> float:
        low, high = self.config.latency_ms
        if high <= 0:
            return 0.0
        return (low if low == high else self.rng.uniform(low, high)) / 1000.0

    # --- rate limit -----------------------------------------------------------------------------

    def take_rate_slot(self) -> RateDecision | None:
        """None without an rpm limit; otherwise admits the request into the 60 s window or not."""
        rpm = self.config.rpm
        if rpm is None:
            return None
        now, wall = self._clock(), self._wall()
        window = self._window
        while window and window[0] <= now - WINDOW_SECONDS:
            window.popleft()
        allowed = len(window) < rpm
        if allowed:
            window.append(now)
        # reset: when the window is fully replenished (as Anthropic documents the header).
        reset = format_rfc3339(wall + (window[-1] + WINDOW_SECONDS - now if window else 0.0))
        if allowed:
            retry_after = 0
        else:
            oldest = window[len(window) - rpm]  # the slot that frees first for this limit
            retry_after = max(1, math.ceil(oldest + WINDOW_SECONDS - now))
        return RateDecision(allowed, rpm, max(0, rpm - len(window)), reset, retry_after)

    def injected_rate_headers(self) -> RateDecision:
        """Headers for an injected 429 fault: retry after 1 s."""
        limit = self.config.rpm or 50
        return RateDecision(False, limit, 0, format_rfc3339(self._wall() + 1), 1)

    # --- prompt cache ---------------------------------------------------------------------------

    def cache_hit(self, model: str, key: str, ttl: str) -> bool:
        """True for a live entry (refreshed); otherwise records a new entry and returns False."""
        now = self._clock()
        expires = self._cache.get((model, key))
        hit = expires is not None and expires > now
        self._cache[(model, key)] = (
            max(expires or 0.0, now + CACHE_TTLS[ttl]) if hit else now + CACHE_TTLS[ttl]
        )
        if len(self._cache) > 10_000:
            self._cache = {k: v for k, v in self._cache.items() if v > now}
        return hit

    # --- counters -------------------------------------------------------------------------------

    def count_request(self) -> int:
        """Counts a request; returns the epoch it belongs to (pass it to the other counters)."""
        self.requests += 1
        return self.epoch

    def count_status(self, status: int, epoch: int | None = None) -> None:
        if epoch is not None and epoch != self.epoch:
            return
        self.by_status[str(status)] = self.by_status.get(str(status), 0) + 1

    def count_dropped(self, epoch: int | None = None) -> None:
        if epoch is not None and epoch != self.epoch:
            return
        self.dropped += 1

    def count_timed_out(self, epoch: int | None = None) -> None:
        if epoch is not None and epoch != self.epoch:
            return
        self.timed_out += 1

    def bill(self, price: Price, usage: Mapping[str, Any], epoch: int | None = None) -> Decimal:
        """Adds one answered (or dropped / timed-out) message to the bill; returns its cost.
        A request from before the last reset is not billed to the new counters."""
        if epoch is not None and epoch != self.epoch:
            return Decimal(0)
        for name in _TOKEN_FIELDS:
            self.billed[name] += usage[name]
        split = usage["cache_creation"]
        cost = (
            usage["input_tokens"] * price.input
            + split["ephemeral_5m_input_tokens"] * price.cache_write_5m
            + split["ephemeral_1h_input_tokens"] * price.cache_write_1h
            + usage["cache_read_input_tokens"] * price.cache_read
            + usage["output_tokens"] * price.output
        ) / Decimal(1_000_000)
        self.cost += cost
        return cost

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "by_status": dict(sorted(self.by_status.items())),
            "dropped": self.dropped,
            "timed_out": self.timed_out,
            "billed": {**self.billed, "cost_usd": format(self.cost.normalize(), "f")},
        }

    def with_changes(self, **changes: Any) -> Config:
        return replace(self.config, **changes)
