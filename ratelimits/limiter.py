"""The shared limiter in Redis: one sliding window and one pace per provider and model, three Lua
scripts.

Every worker thread of every process on every host reserves against the same keys
(``llmops.queues.rate_limit_key``) in one atomic script, on Redis' clock:

- ``reserve.lua``: a call takes 1 request, its input-token bound and its ``max_tokens`` in a
  sliding window (``LLM_RATE_LIMIT_WINDOW_SECONDS`` + margin) if all three fit under their
  limits, less what is held back for other features' and users' waiting calls, and its request
  is due at the paced rate (one every window / R, ``LLM_RATE_LIMIT_BURST_SECONDS`` of burst);
  otherwise it says how long until they would fit (or the shared pause ends): wait that long in
  process, or be held and come back at a slot of the feature's line.
- ``sent.lua``: just before the request leaves, its reservation is stamped again with the time
  it really leaves (or it is told to wait: its slot moved behind a pause set since).
- ``settle.lua``: after the answer, the reservation becomes what the call used, the provider's
  ``anthropic-ratelimit-*`` headers are learned, and a 429 sets the pause every worker obeys
  (one that still shows room shrinks the burst: the provider enforces a shorter interval; and
  widens the pacing margin when the last one proved too narrow).

A sliding window of N calls per 60 s never sends more than a provider's token bucket of the same
size admits (its capacity N refills at N per minute), nor more than a sliding window does: it is
safe against either kind of provider limit. The pace spreads those N across the window, for a
provider that enforces its limit over shorter intervals too (docs/operations.md, Rate limits).
"""

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypedDict, Unpack

from django.conf import settings
from redis import Redis
from redis.commands.core import Script

from llmops.queues import LLM_QUEUE, rate_limit_key
from runtime.redis_clients import queue_connection

__all__ = [
    "KEY_PARTS",
    "Verdict",
    "limiter_keys",
    "limiter_mark_sent",
    "limiter_reserve",
    "limiter_settle",
    "redis_client",
]

KEY_PARTS = (
    "window",
    "entries",
    "usage",
    "waiting",
    "waitentries",
    "waitsum",
    "learned",
    "pause",
    "holds",
    "pace",
)
"""The keys of one provider's and model's limiter, in the order reserve.lua takes them."""

IDLE_KEY_SECONDS = 3600
"""An idle limiter's keys (the window, what waits, the feature lines) expire after an hour; the
learned limits live ``LLM_RATE_LIMIT_LEARNED_TTL_SECONDS`` from the last answer."""

STRICT_PACE_STRETCH = 1.02
"""While a short-interval 429 keeps the burst below its setting, calls are paced at least 2 %
further apart: with no burst to absorb it, the jitter between our admission and the provider's
arrival stamp (the budget reservation and the claim come between, tens of ms on a loaded host)
would otherwise meet the provider's interval now and then; 2 % of a 5 s interval is 100 ms."""

STRICT_PACE_MAX_STRETCH = 1.16
"""The most that margin grows to. Each short-interval 429 of a call paced under the margin in
force doubles it (2, 4, 8, 16 %): that jitter is the host's, and a loaded host's outgrows 100 ms
(docs/operations.md, Rate limits), where a fixed 2 % met the interval again and again, each 429
pausing every worker. Each period of
``LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS`` without one halves it back towards 2 %. 16 % of a 5 s
interval is 800 ms: beyond that the host, not the margin, is the problem."""

STRICT_LATE_TOLERANCE_MS = 40
"""Under strict pacing learned from a 429, a call leaving up to this much after its slot moves
nothing (under a fresh limiter's slow start, up to what the 2 % absorbs over
``LLM_RATE_LIMIT_BURST_SECONDS``, 100 ms at 5 s, if that is more); a later one
moves the slots given after it that it came too close to by its lateness past this much, one
interval apart (sent.lua), the spacing a call late by just this much keeps: at
120 RPM the 2 % stretch leaves 10 ms per interval, so 40 ms is absorbed by any provider
interval of 4 calls (2 s) or more; moving every slot for a few ms late cost 6 % of the rate in
bench/ratelimit.py. A wider learned margin absorbs proportionally more (80 ms at 4 %)."""

_LUA = Path(__file__).resolve().parent / "lua"


@cache
def _script(name: str) -> Script:
    # A Script only computes its SHA here; each call names the client it runs on, and falls
    # back from EVALSHA to EVAL when Redis has lost its script cache (a restart, a flush).
    return Script(None, (_LUA / f"{name}.lua").read_bytes())  # type: ignore[arg-type]


def redis_client() -> Redis:
    """The llm queue's client, shared by every limiter call of this process
    (runtime/redis_clients.py): one connection pool, which a forked child replaces on its own."""
    return queue_connection(LLM_QUEUE)


def limiter_keys(provider: str, model: str) -> list[str]:
    return [rate_limit_key(provider, model, part) for part in KEY_PARTS]


def _window_ms() -> int:
    return int(
        (settings.LLM_RATE_LIMIT_WINDOW_SECONDS + settings.LLM_RATE_LIMIT_MARGIN_SECONDS) * 1000
    )


@dataclass(frozen=True)
class Verdict:
    status: int
    """1 admitted (start in ``ms``: its paced slot, 0 at once), 0 wait ``ms`` in process and ask
    again, 2 hold the job ``ms``."""
    ms: int
    reason: str
    """admitted, requests, input_tokens, output_tokens, tokens, share, user_max_share,
    pacing (the next paced slot is not due yet), learning (nothing known yet: a few calls find
    the limits out) or paused (after a 429)."""

    @property
    def admitted(self) -> bool:
        return self.status == 1


def _limit(value: int | None) -> int:
    return -1 if value is None else value


class ReserveRequest(TypedDict):
    provider: str
    model: str
    reservation_id: str
    job_id: str
    feature: str
    user: str
    input_tokens: int
    output_tokens: int
    rpm: int | None
    input_tpm: int | None
    output_tpm: int | None
    weights: dict[str, float]
    max_wait_ms: int


def reserve_call(**call: Unpack[ReserveRequest]) -> tuple[list[str], list[Any]]:
    """The keys and arguments of one ``reserve.lua`` call (its header says what each means)."""
    return limiter_keys(call["provider"], call["model"]), [
        call["reservation_id"],
        call["job_id"],
        call["feature"],
        call["user"],
        max(0, call["input_tokens"]),
        max(0, call["output_tokens"]),
        _limit(call["rpm"]),
        _limit(call["input_tpm"]),
        _limit(call["output_tpm"]),
        _window_ms(),
        json.dumps(call["weights"]),
        1 if settings.LLM_USER_FAIR_SHARE else 0,
        repr(settings.LLM_USER_MAX_SHARE),
        settings.LLM_RATE_LIMIT_BOOTSTRAP_CONCURRENCY,
        max(0, call["max_wait_ms"]),
        IDLE_KEY_SECONDS * 1000,
        int(settings.LLM_RATE_LIMIT_BURST_SECONDS * 1000),
        max(1, int(settings.LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS * 1000)),
        repr(STRICT_PACE_STRETCH),
        1 if settings.LLM_RATE_LIMIT_SLOW_START else 0,
        int(settings.LLM_RATE_LIMIT_PACE_AHEAD_SECONDS * 1000),
    ]


def reserve_script() -> Script:
    return _script("reserve")


def verdict_of(answer: list[Any]) -> Verdict:
    status, ms, reason = answer
    return Verdict(int(status), int(ms), reason.decode() if isinstance(reason, bytes) else reason)


def limiter_reserve(**call: Unpack[ReserveRequest]) -> Verdict:
    """Reserve one call (the arguments of :func:`reserve_call`) or say how long to wait."""
    keys, args = reserve_call(**call)
    return verdict_of(reserve_script()(keys=keys, args=args, client=redis_client()))


def limiter_mark_sent(*, provider: str, model: str, reservation_id: str) -> int:
    """Stamp the reservation with the send time and return 0; or, when its paced slot is still
    ahead (moved behind a pause) or every worker is paused, return the ms to wait first."""
    paused = _script("sent")(
        keys=[rate_limit_key(provider, model, part) for part in ("window", "pause", "pace")],
        args=[
            reservation_id,
            STRICT_LATE_TOLERANCE_MS,
            f"{STRICT_PACE_STRETCH - 1:.4f}",
            int(settings.LLM_RATE_LIMIT_BURST_SECONDS * (STRICT_PACE_STRETCH - 1) * 1000),
        ],
        client=redis_client(),
    )
    return int(paused or 0)


def limiter_settle(
    *,
    provider: str,
    model: str,
    reservation_id: str,
    requests: int = 1,
    input_tokens: int = 0,
    output_tokens: int = 0,
    learned: dict[str, tuple[int, int, int]] | None = None,
    pause_seconds: float = 0.0,
    mode: str = "settle",
    rate_limited: bool = False,
) -> None:
    """Set a reservation to what the call used (``mode`` settle), leave it as reserved (keep:
    the outcome is unknown) or take it away (drop: the call never left); learn ``learned``
    ({kind: (limit, remaining, reset epoch ms)}; None: nothing to learn), and pause every worker
    ``pause_seconds``. ``rate_limited``: the answer was a rate-limit 429 (with room left in its
    headers, the burst shrinks: settle.lua)."""
    assert mode in ("settle", "keep", "drop")
    keys = limiter_keys(provider, model)
    args: list[Any] = [
        reservation_id,
        requests,
        max(0, input_tokens),
        max(0, output_tokens),
        "" if learned is None else json.dumps({k: list(v) for k, v in learned.items()}),
        int(settings.LLM_RATE_LIMIT_LEARNED_TTL_SECONDS * 1000),
        int(pause_seconds * 1000),
        _window_ms(),
        IDLE_KEY_SECONDS * 1000,
        mode,
        1 if rate_limited else 0,
        f"{STRICT_PACE_STRETCH - 1:.4f}",
        f"{STRICT_PACE_MAX_STRETCH - 1:.4f}",
    ]
    _script("settle")(
        keys=[keys[0], keys[1], keys[2], keys[6], keys[7], keys[9]],
        args=args,
        client=redis_client(),
    )
