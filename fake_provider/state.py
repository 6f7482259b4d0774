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
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from .codes import (
    FAULT_CODES,
    parse_batch_seconds,
    parse_fault,
    parse_faults,
    parse_latency,
    parse_rate_window,
    parse_rpm,
    parse_share,
    parse_short_interval,
    parse_stream_pace,
)
from .prices import (
    PRICES,
    WEB_SEARCH_USD,
    Price,
    openai_price_for,
    price_for,
)
from .rate_windows import RateDecision, TokenSlot, TokenWindow
from .scripts import Scripts

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
    "parse_stream_pace",
    "openai_price_for",
    "price_for",
]

WINDOW_SECONDS = 60.0
ARRIVAL_LOG_LIMIT = 10_000
"""Arrival times kept for ``GET /_fake/arrivals``: what a pacing test reads, on our clock."""
CALL_LOG_LIMIT = 200_000
"""Ended Messages API calls kept for ``GET /_fake/calls``: who called (the client's address),
with which Idempotency-Key, when it arrived and ended; a cluster drill tells hosts apart by it."""
BILLING_LOG_LIMIT = 200_000
"""Billed calls kept for ``GET /_fake/billing`` (the oldest fall off): a chaos drill's few
thousand calls fit many times over, a fake provider left running for days stays bounded."""
DEFAULT_CACHE_TTL = "5m"
CACHE_TTLS = {"5m": 300.0, "1h": 3600.0}

BATCH_PROCESSING_SECONDS = 1.0
"""How long a message batch (batches.py) takes by default: its items end spread over it."""
BATCH_OUTCOMES = ("succeeded", "errored", "canceled", "expired")
TRICKLE_INTERVAL_SECONDS = 1.0
"""A ``trickle`` answer sends one byte of its body this often: no read timeout ever fires."""


def format_rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        # (Idempotency-Key, client address, arrived, ended) of each ended call, wall clock.
        self.calls: deque[tuple[str, str, float, float]] = deque(maxlen=CALL_LOG_LIMIT)
        self._persistent = self.start_config
        self._override: Config | None = None
        self._override_until: float | None = None
        self.rng = random.Random(self.seed)
        self._window: deque[float] = deque()
        self._input_window = TokenWindow()
        self._output_window = TokenWindow()
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
        # The same bill per model: tokens of each kind and the cost (the money checks compare
        # the ledger with it model by model).
        self.billed_by_model: dict[str, dict[str, Any]] = {}
        # One entry per billed call: (request id, Idempotency-Key, cost, how it ended, output
        # tokens, (batch id, custom_id) of a batch item or None).
        self.billing: deque[tuple[str, str, Decimal, str, int, tuple[str, str] | None]] = deque(
            maxlen=BILLING_LOG_LIMIT
        )
        self.billing_evicted = 0
        # Message batches (batches.py), oldest first; their items' outcomes and bill.
        self.batches: dict[str, Any] = {}  # batches.py's Batch, by id
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
        slots: list[tuple[str, TokenSlot]] = []
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

    def call_started(self, idempotency_key: str = "") -> float:
        """A POST /v1/messages arrived; it is in flight until ``call_ended``. Returns when it
        arrived (wall clock), for ``call_ended``'s log."""
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        if idempotency_key:
            self.keys_in_flight[idempotency_key] += 1
        return self._wall()

    def call_ended(
        self, idempotency_key: str = "", *, client: str = "", arrived: float | None = None
    ) -> None:
        self.in_flight -= 1
        if arrived is not None:
            self.calls.append((idempotency_key, client, arrived, self._wall()))
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
        by_model = self.billed_by_model.setdefault(
            price.model, {**dict.fromkeys(_TOKEN_FIELDS, 0), "cost": Decimal(0)}
        )
        for name in _TOKEN_FIELDS:
            self.billed[name] += usage[name]
            by_model[name] += usage[name]
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
        by_model["cost"] += cost
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

    def call_log(self) -> dict[str, Any]:
        """Every ended Messages API call, oldest first (not cleared by a reset: a call in flight
        across one ends after it)."""
        return {
            "calls": [
                {"idempotency_key": key, "client": client, "arrived": arrived, "ended": ended}
                for key, client, arrived, ended in self.calls
            ]
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
            "billed_by_model": {
                model: {
                    **{name: bill[name] for name in _TOKEN_FIELDS},
                    "cost_usd": format(bill["cost"].normalize(), "f"),
                }
                for model, bill in sorted(self.billed_by_model.items())
            },
        }

    def with_changes(self, **changes: Any) -> Config:
        return replace(self.config, **changes)
