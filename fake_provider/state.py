"""In-process state of the fake provider: configuration, prices, prompt cache, rate windows, stats.

Everything here runs on the single asyncio loop of one uvicorn worker. No method awaits, so each
call is atomic with respect to other requests and no lock is needed.

Rate limits, as the Messages API has them: requests (``rpm``), input tokens (``itpm``) and output
tokens (``otpm``) per sliding window of ``rate_window_seconds`` (60). A request is admitted on
arrival: input tokens count the whole prompt until the answer says how many were not cache reads
(cache reads do not count, as for current Claude models); output tokens count ``max_tokens`` until
the answer says how many were produced (the provider estimates output from ``max_tokens`` up
front). Each configured limit answers its ``anthropic-ratelimit-<kind>-limit/-remaining/-reset``
headers (reset: when the window is fully replenished, RFC 3339), on successes and errors alike;
with both token limits set, ``anthropic-ratelimit-tokens-*`` carry their sums. A request over
any limit gets 429 with ``retry-after``: whole seconds until enough of the window frees.

``short_interval_seconds`` (S) also enforces the requests limit over any S seconds, as the API
documents it may ("60 RPM may be enforced as one request a second"): at most
max(1, floor(rpm * S / rate_window_seconds)) requests in any S s. Such a 429 still shows the
window's remaining requests in its headers, as the real one does: the window has room.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .scripts import Scripts

if TYPE_CHECKING:
    from .batches import Batch

__all__ = [
    "FAULT_CODES",
    "TRICKLE_INTERVAL_SECONDS",
    "PRICES",
    "Config",
    "FakeProviderState",
    "Price",
    "RateDecision",
    "format_rfc3339",
    "parse_batch_seconds",
    "parse_fault",
    "parse_faults",
    "parse_latency",
    "parse_rate_window",
    "parse_rpm",
    "parse_share",
    "parse_short_interval",
    "price_for",
]

WINDOW_SECONDS = 60.0
ARRIVAL_LOG_LIMIT = 10_000
"""Arrival times kept for ``GET /_fake/arrivals``: what a pacing test reads, on our clock."""
BILLING_LOG_LIMIT = 200_000
"""Billed calls kept for ``GET /_fake/billing`` (the oldest fall off): a chaos drill's few
thousand calls fit many times over, a fake provider left running for days stays bounded."""
DEFAULT_CACHE_TTL = "5m"
CACHE_TTLS = {"5m": 300.0, "1h": 3600.0}

FAULT_CODES = (
    "400", "401", "403", "404", "409", "413", "429", "500", "502", "503", "504", "529",
    "spendcap", "credit", "context", "usagelimit", "timeout", "drop", "garbage", "trickle",
    "overloaded_midstream", "stall", "insufficient_quota",
)  # fmt: skip
BATCH_PROCESSING_SECONDS = 1.0
"""How long a message batch (batches.py) takes by default: its items end spread over it."""
BATCH_OUTCOMES = ("succeeded", "errored", "canceled", "expired")
TRICKLE_INTERVAL_SECONDS = 1.0
"""A ``trickle`` answer sends one byte of its body this often: no read timeout ever fires."""


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


WEB_SEARCH_USD = Decimal("0.01")
"""The web search server tool's fee per search ($10 per 1,000 searches)."""

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


# The OpenAI-compatible API's list (openai_compat.py); any other model it is asked for is a
# self-hosted one, served at no cost (as an Ollama or vLLM would).
OPENAI_PRICES: dict[str, Price] = {
    "gpt-4o-mini": _price("0.15/0.15/0.15/0.075/0.60", 16_384),
    "gpt-4.1": _price("2/2/2/0.50/8", 32_768),
    "text-embedding-3-small": _price("0.02/0.02/0.02/0.02/0", 1),
    "text-embedding-3-large": _price("0.13/0.13/0.13/0.13/0", 1),
}
SELF_HOSTED_PRICE = _price("0/0/0/0/0", 131_072)


def openai_price_for(model: str) -> Price:
    """The OpenAI-compatible API's price of a model: listed, or free (self-hosted)."""
    return OPENAI_PRICES.get(model, SELF_HOSTED_PRICE)


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


def parse_rate_window(value: Any) -> float:
    """Seconds of the rate-limit window: a number in (0, 3600]. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"rate_window_seconds must be a number of seconds, not {value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"rate_window_seconds must be a number of seconds, not {value!r}"
        ) from None
    if not 0 < seconds <= 3600:
        raise ValueError(f"rate_window_seconds must be in (0, 3600], not {value!r}")
    return seconds


def parse_short_interval(value: Any) -> float | None:
    """Seconds over which the requests limit is also enforced: None / 0 for none, or a number
    in (0, 3600]. Raises ValueError."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"short_interval_seconds must be a number of seconds, not {value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"short_interval_seconds must be a number of seconds, not {value!r}"
        ) from None
    if seconds == 0:
        return None
    if not 0 < seconds <= 3600:
        raise ValueError(f"short_interval_seconds must be in (0, 3600], not {value!r}")
    return seconds


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


def parse_stream_pace(value: Any) -> float | None:
    """Output tokens a second of a streamed answer: a positive number, or None / 0 for no pace."""
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"stream_tokens_per_second must be a positive number, not {value!r}")
    return float(value)


def parse_batch_seconds(value: Any) -> float:
    """How long a message batch takes: a number of seconds in [0, 86400] (its 24 hours)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86_400:
        raise ValueError(f"batch_processing_seconds must be a number in [0, 86400], not {value!r}")
    return float(value)


def parse_share(name: str, value: Any) -> float:
    """A share of a batch's items: a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], not {value!r}")
    return float(value)


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
    itpm: int | None = None
    otpm: int | None = None
    rate_window_seconds: float = WINDOW_SECONDS
    short_interval_seconds: float | None = None
    stream_tokens_per_second: float | None = None
    """A stream's pace (streaming.py); None: as fast as the socket takes it."""
    batch_processing_seconds: float = BATCH_PROCESSING_SECONDS
    batch_errored_rate: float = 0.0
    batch_expired_rate: float = 0.0
    """Shares of a new batch's items that end errored or expired (batches.py)."""

    def short_limit(self) -> int | None:
        """Requests admitted in any ``short_interval_seconds`` (None: not enforced)."""
        if self.rpm is None or self.short_interval_seconds is None:
            return None
        share = self.short_interval_seconds / self.rate_window_seconds
        return min(self.rpm, max(1, math.floor(self.rpm * share + 1e-9)))

    def describe(self) -> dict[str, Any]:
        low, high = self.latency_ms
        return {
            "faults": dict(self.faults),
            "latency_ms": str(low) if low == high else f"{low}-{high}",
            "rpm": self.rpm,
            "itpm": self.itpm,
            "otpm": self.otpm,
            "rate_window_seconds": self.rate_window_seconds,
            "short_interval_seconds": self.short_interval_seconds,
            "stream_tokens_per_second": self.stream_tokens_per_second,
            "batch_processing_seconds": self.batch_processing_seconds,
            "batch_errored_rate": self.batch_errored_rate,
            "batch_expired_rate": self.batch_expired_rate,
        }

    def describe_limits(self) -> str:
        per = f"per {self.rate_window_seconds:g} s"
        limits = [
            f"{value} {name} {per}"
            for name, value in (
                ("requests", self.rpm),
                ("input tokens", self.itpm),
                ("output tokens", self.otpm),
            )
            if value is not None
        ]
        short = self.short_limit()
        if short is not None:
            limits.append(f"{short} requests per {self.short_interval_seconds:g} s")
        return ", ".join(limits) or "none"

    def faults_text(self) -> str:
        return ",".join(f"{code}:{rate:g}" for code, rate in self.faults) or "none"


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    limit: int | None
    """The requests limit; None when only token limits are set."""
    remaining: int
    reset: str
    retry_after: int
    token_headers: tuple[tuple[str, str], ...] = ()
    slots: tuple[tuple[str, _TokenSlot], ...] = ()
    """("input" | "output", entry) this request holds in the token windows (settled later)."""

    def headers(self) -> list[tuple[str, str]]:
        requests = []
        if self.limit is not None:
            requests = [
                ("anthropic-ratelimit-requests-limit", str(self.limit)),
                ("anthropic-ratelimit-requests-remaining", str(self.remaining)),
                ("anthropic-ratelimit-requests-reset", self.reset),
            ]
        return [*requests, *self.token_headers]


class _TokenSlot:
    """One request's tokens in a token window; corrected to the real count after the answer."""

    __slots__ = ("at", "live", "owner", "tokens")

    def __init__(self, at: float, tokens: int, owner: _TokenWindow) -> None:
        self.at, self.tokens, self.owner, self.live = at, tokens, owner, True


class _TokenWindow:
    """Tokens admitted in the last ``seconds``: a sliding window with a running sum."""

    def __init__(self) -> None:
        self.slots: deque[_TokenSlot] = deque()
        self.used = 0

    def trim(self, now: float, seconds: float) -> None:
        while self.slots and self.slots[0].at <= now - seconds:
            slot = self.slots.popleft()
            slot.live = False
            self.used -= slot.tokens

    def wait_for(self, tokens: int, limit: int, now: float, seconds: float) -> float:
        """Seconds until ``tokens`` more fit under ``limit`` as the oldest entries leave."""
        excess, freed = self.used + tokens - limit, 0
        for slot in self.slots:
            freed += slot.tokens
            if freed >= excess:
                return slot.at + seconds - now
        return seconds

    def admit(self, at: float, tokens: int) -> _TokenSlot:
        slot = _TokenSlot(at, tokens, self)
        self.slots.append(slot)
        self.used += tokens
        return slot

    def settle(self, slot: _TokenSlot, tokens: int) -> None:
        # A slot that already left the window (or belongs to one from before a reset) no longer
        # counts here.
        if slot.live and slot.owner is self:
            self.used += tokens - slot.tokens
        slot.tokens = tokens


_TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


class FakeProviderState:
    """Configuration, counters, prompt-cache memory and the rate windows of one fake provider."""

    def __init__(
        self,
        *,
        faults: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
        latency_ms: Any = 0,
        rpm: Any = None,
        itpm: Any = None,
        otpm: Any = None,
        rate_window_seconds: Any = WINDOW_SECONDS,
        short_interval_seconds: Any = None,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.start_config = Config(
            parse_faults(faults),
            parse_latency(latency_ms),
            parse_rpm(rpm),
            parse_rpm(itpm),
            parse_rpm(otpm),
            parse_rate_window(rate_window_seconds),
            parse_short_interval(short_interval_seconds),
        )
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
        # The in-flight gauge is the server's, not the counters': calls in flight across a reset
        # stay counted, and the peak starts again from them.
        self.in_flight = getattr(self, "in_flight", 0)
        self.peak_in_flight = self.in_flight
        # The Idempotency-Key (our job id) of each call in flight: which jobs' calls have left.
        if not hasattr(self, "keys_in_flight"):
            self.keys_in_flight: Counter[str] = Counter()
        self._persistent = self.start_config
        self._override: Config | None = None
        self._override_until: float | None = None
        self.rng = random.Random(self.seed)
        self._window: deque[float] = deque()
        self._input_window = _TokenWindow()
        self._output_window = _TokenWindow()
        self._cache: dict[tuple[str, str], float] = {}
        self.scripts = Scripts(self._clock)
        self.requests = 0
        self.arrivals: deque[float] = deque(maxlen=ARRIVAL_LOG_LIMIT)
        self.by_status: dict[str, int] = {}
        self.dropped = 0
        self.timed_out = 0
        self.embedded_inputs = 0
        self.billed = dict.fromkeys(_TOKEN_FIELDS, 0)
        self.cost = Decimal(0)
        # One entry per billed call: (request id, Idempotency-Key, cost, how it ended, output
        # tokens, (batch id, custom_id) of a batch item or None).
        self.billing: deque[tuple[str, str, Decimal, str, int, tuple[str, str] | None]] = deque(
            maxlen=BILLING_LOG_LIMIT
        )
        self.billing_evicted = 0
        # Message batches (batches.py), oldest first; their items' outcomes and bill.
        self.batches: dict[str, Batch] = {}
        self.batch_requests = 0
        self.batch_results = dict.fromkeys(BATCH_OUTCOMES, 0)
        self.batch_cost = Decimal(0)

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
        described["script"] = self.scripts.describe()
        return described

    def now(self) -> float:
        """The monotonic clock the state runs on (scripts, windows, batches)."""
        return self._clock()

    def wall(self) -> float:
        return self._wall()

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

    def take_rate_slot(self, input_tokens: int = 0, max_tokens: int = 0) -> RateDecision | None:
        """None without any limit; otherwise admits the request into every window, or none."""
        config = self.config
        rpm, itpm, otpm = config.rpm, config.itpm, config.otpm
        if rpm is None and itpm is None and otpm is None:
            return None
        seconds = config.rate_window_seconds
        now, wall = self._clock(), self._wall()
        window = self._window
        while window and window[0] <= now - seconds:
            window.popleft()
        self._input_window.trim(now, seconds)
        self._output_window.trim(now, seconds)
        # A request larger than a whole limit is admitted on an empty window (as it could never
        # be otherwise); the provider would refuse it as too large, not as rate limited.
        tokens = [
            ("input", self._input_window, itpm, min(input_tokens, itpm or 0)),
            ("output", self._output_window, otpm, min(max_tokens, otpm or 0)),
        ]
        waits = []
        if rpm is not None and len(window) >= rpm:
            waits.append(window[len(window) - rpm] + seconds - now)
        short, short_limit = config.short_interval_seconds, config.short_limit()
        if short is not None and short_limit is not None and len(window) >= short_limit:
            # The window holds arrival times in order: the short_limit-th latest decides.
            nth = window[len(window) - short_limit]
            if nth > now - short:
                waits.append(nth + short - now)
        for _, token_window, limit, cost in tokens:
            if limit is not None and token_window.used + cost > limit:
                waits.append(token_window.wait_for(cost, limit, now, seconds))
        allowed = not waits
        slots: list[tuple[str, _TokenSlot]] = []
        if allowed:
            if rpm is not None:
                window.append(now)
            for kind, token_window, limit, cost in tokens:
                if limit is not None:
                    slots.append((kind, token_window.admit(now, cost)))

        def reset_of(last: float | None) -> str:
            # When the window is fully replenished (as Anthropic documents the header).
            return format_rfc3339(wall + (last + seconds - now if last is not None else 0.0))

        token_headers: list[tuple[str, str]] = []
        for kind, token_window, limit in (
            ("input-tokens", self._input_window, itpm),
            ("output-tokens", self._output_window, otpm),
        ):
            if limit is not None:
                last = token_window.slots[-1].at if token_window.slots else None
                left = max(0, limit - token_window.used)
                token_headers += [
                    (f"anthropic-ratelimit-{kind}-limit", str(limit)),
                    (f"anthropic-ratelimit-{kind}-remaining", str(left)),
                    (f"anthropic-ratelimit-{kind}-reset", reset_of(last)),
                ]
        if itpm is not None and otpm is not None:
            lasts = [w.slots[-1].at for w in (self._input_window, self._output_window) if w.slots]
            used = self._input_window.used + self._output_window.used
            token_headers += [
                ("anthropic-ratelimit-tokens-limit", str(itpm + otpm)),
                ("anthropic-ratelimit-tokens-remaining", str(max(0, itpm + otpm - used))),
                ("anthropic-ratelimit-tokens-reset", reset_of(max(lasts) if lasts else None)),
            ]
        return RateDecision(
            allowed,
            rpm,
            max(0, rpm - len(window)) if rpm is not None else 0,
            reset_of(window[-1] if window else None),
            0 if allowed else max(1, math.ceil(max(waits))),
            tuple(token_headers),
            tuple(slots),
        )

    def settle_tokens(self, decision: RateDecision | None, usage: Mapping[str, Any]) -> None:
        """Correct an admitted request's token entries to what its answer used: input tokens
        that were not cache reads, and the output tokens produced."""
        if decision is None:
            return
        for kind, slot in decision.slots:
            if kind == "input":
                self._input_window.settle(
                    slot, usage["input_tokens"] + usage["cache_creation_input_tokens"]
                )
            else:
                self._output_window.settle(slot, usage["output_tokens"])

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

    def call_started(self, idempotency_key: str = "") -> None:
        """A POST /v1/messages arrived; it is in flight until ``call_ended``."""
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        if idempotency_key:
            self.keys_in_flight[idempotency_key] += 1

    def call_ended(self, idempotency_key: str = "") -> None:
        self.in_flight -= 1
        if idempotency_key:
            self.keys_in_flight[idempotency_key] -= 1
            if self.keys_in_flight[idempotency_key] <= 0:
                del self.keys_in_flight[idempotency_key]

    def count_request(self) -> int:
        """Counts a request; returns the epoch it belongs to (pass it to the other counters)."""
        self.requests += 1
        self.arrivals.append(self._wall())
        return self.epoch

    def count_status(self, status: int, epoch: int | None = None) -> None:
        if epoch is not None and epoch != self.epoch:
            return
        self.by_status[str(status)] = self.by_status.get(str(status), 0) + 1

    def count_embedded(self, inputs: int, epoch: int | None = None) -> None:
        """Texts an embeddings call embedded (and billed)."""
        if epoch is not None and epoch != self.epoch:
            return
        self.embedded_inputs += inputs

    def count_dropped(self, epoch: int | None = None) -> None:
        if epoch is not None and epoch != self.epoch:
            return
        self.dropped += 1

    def count_timed_out(self, epoch: int | None = None) -> None:
        if epoch is not None and epoch != self.epoch:
            return
        self.timed_out += 1

    def bill(
        self,
        price: Price,
        usage: Mapping[str, Any],
        epoch: int | None = None,
        *,
        request_id: str = "",
        idempotency_key: str = "",
        how: str = "answered",
        batch_item: tuple[str, str] | None = None,
    ) -> Decimal:
        """Adds one answered (or dropped / timed-out) message to the bill; returns its cost.
        A request from before the last reset is not billed to the new counters. The call is also
        kept in the billing log with its request id, the caller's ``Idempotency-Key`` and ``how``
        it ended (answered, dropped, timed_out, garbage): who was billed what, per call. A batch
        item (``batch_item``: its batch id and custom_id) also counts under ``batch_cost``."""
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
        searches = (usage.get("server_tool_use") or {}).get("web_search_requests", 0)
        cost += searches * WEB_SEARCH_USD
        self.cost += cost
        if batch_item is not None:
            self.batch_cost += cost
        if len(self.billing) == self.billing.maxlen:
            self.billing_evicted += 1
        self.billing.append(
            (request_id, idempotency_key, cost, how, usage["output_tokens"], batch_item)
        )
        return cost

    def billing_log(self) -> dict[str, Any]:
        """Every billed call since the last reset (up to ``BILLING_LOG_LIMIT``, oldest first)."""
        return {
            "calls": [
                {
                    "request_id": request_id,
                    "idempotency_key": key,
                    "cost_usd": format(cost.normalize(), "f"),
                    "how": how,
                    "output_tokens": output_tokens,
                    **({"batch_id": item[0], "custom_id": item[1]} if item else {}),
                }
                for request_id, key, cost, how, output_tokens, item in self.billing
            ],
            "evicted": self.billing_evicted,
        }

    def calls_in_flight(self) -> dict[str, Any]:
        """The Idempotency-Keys (our job ids) of the calls in flight now."""
        return {"keys": sorted(self.keys_in_flight)}

    def arrival_log(self) -> dict[str, Any]:
        """When each request since the last reset arrived (epoch seconds, oldest first)."""
        return {"arrivals": list(self.arrivals)}

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "by_status": dict(sorted(self.by_status.items())),
            "dropped": self.dropped,
            "timed_out": self.timed_out,
            "embedded_inputs": self.embedded_inputs,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "batch_requests": self.batch_requests,
            "batch_results": dict(self.batch_results),
            "billed": {
                **self.billed,
                "cost_usd": format(self.cost.normalize(), "f"),
                "batch_cost_usd": format(self.batch_cost.normalize(), "f"),
            },
        }

    def with_changes(self, **changes: Any) -> Config:
        return replace(self.config, **changes)
