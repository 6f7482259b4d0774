"""What a drill does and when: its options, its timeline of faults, and the timing knobs it
scales in the processes it starts.

The production checklist's drill (point 7) runs for hours against a test environment: 429s on
20 % of calls for five minutes, 529s for two minutes, connections cut mid-answer. Here the whole
drill takes ``duration`` seconds of load (five minutes by default) and every fault gets a slice
of it, in an order that keeps them apart: rate limits, a call that trickles past its deadline,
a budget disabled and enabled again, overload, the reconciler stopped (two minutes by default)
while a worker is killed with -9 and Redis flushed while no rq scheduler runs, a few 401s (the
breaker), a token revoked under its open WebSocket, a worker killed while jobs wait on the rate
limiter (after the flush and with the reconciler back: a flush would put its jobs back by
another path, and their recovery is the reconciler's), a call longer than the stale threshold.
Dropped connections run through most of it. The 401s come after the flush: a flush right after
them would lose their alerts' delivery jobs, which the monitor puts back only after five minutes
(alerts/dispatch.py), and the drill would wait for that. The long calls come after the reconciler
is back: a takeover needs it.

A fault that depends on what the system is doing (a call to trickle, calls to slow down, jobs
waiting on the limiter) is held until the provider or the workers show it happened, within a
bound; the drill records what happened, and a check whose fault did not happen says so and fails.
"""

from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DEFAULT_DURATION",
    "DEFAULT_JOBS",
    "FAULT_KINDS",
    "MIN_DURATION",
    "DrillOptions",
    "Knob",
    "Phase",
    "knobs",
    "timeline",
]

FAULT_KINDS: dict[str, str] = {
    "429": "429 rate limits on a share of calls (--rate-429) for a quarter of the drill",
    "529": "529 overloaded on every call for an eighth of the drill",
    "drop": "connections cut mid-answer (--drop-rate) through most of the drill",
    "kill": "the llm worker running the rq scheduler killed with -9 (respawn restarts it)",
    "flush": "FLUSHDB of the system's Redis database while no rq scheduler runs",
    "401": "401s (a revoked key) until the breaker has been open a few seconds; the drill then "
    "closes it as the admin action does",
    "trickle": "a call answered one byte a second, past its deadline (it must end there)",
    "budget": "the drill's budget disabled for a tenth of the drill, then enabled again; one "
    "job in ten on a feature whose tight budget refuses some of them",
    "reconciler": "the reconciler stopped for two fifths of the drill (two minutes by default)",
    "revoke": "the API token of an open WebSocket deleted (the socket must close)",
    "kill-waiting": "an llm worker killed with -9 while jobs it dequeued wait on the rate limiter",
    "long": "calls that outlive the stale threshold (the heartbeat must keep them)",
}
"""Every fault kind a drill can include (--faults), in the order they happen."""

DEFAULT_JOBS = 2000
DEFAULT_DURATION = 300.0
MIN_DURATION = 40.0
"""Below this the faults overlap: each event needs a few seconds of its own."""

STALE_AFTER_SECONDS = 10.0
LONG_CALL_SECONDS = STALE_AFTER_SECONDS + 5.0
"""A long call outlives the stale threshold by a few heartbeats, and stays well under the
stream's idle bound (LLM_STREAM_IDLE_SECONDS, below)."""
LONG_CALL_WINDOW_SECONDS = 2.0
"""Calls that arrive at the provider within this window take LONG_CALL_SECONDS; the window
lasts until LONG_CALLS_WANTED calls arrived in it, however slow the machine."""
LONG_CALLS_WANTED = 4
LONG_CALL_MAX_WAIT_SECONDS = 30.0
"""The long-call window closes after this even if fewer calls arrived (the check says so)."""
READ_TIMEOUT_SECONDS = 20.0
"""The drill's LLM_STREAM_IDLE_SECONDS: the long calls (15 s) stay under it; a trickling call
(the fake provider's ``trickle``: a byte a second, ten minutes for a whole answer) outlives the
call's deadline of connect + idle bound (22 s) well within the drill."""
CONNECT_TIMEOUT_SECONDS = 2.0
"""The drill's LLM_PROVIDER_CONNECT_TIMEOUT: the fake provider is local; a shorter deadline lets
the trickling call end before the reduced drill's kill (which waits for it)."""
RECONCILER_STOP_FRACTION = 0.4
"""The reconciler is stopped for this share of the drill: two minutes of the default five."""


@dataclass(frozen=True)
class DrillOptions:
    jobs: int = DEFAULT_JOBS
    """Jobs submitted, evenly over ``duration``."""
    duration: float = DEFAULT_DURATION
    """Seconds of load and faults; the drain and the checks come after."""
    faults: frozenset[str] = field(default_factory=lambda: frozenset(FAULT_KINDS))
    rate_429: float = 0.2
    drop_rate: float = 0.02
    latency_ms: str = "100-600"
    """The fake provider's latency outside the long-call window."""
    llm_workers: int = 2
    drain_timeout: float = 240.0
    """Seconds the jobs get to reach a final state after the load ends."""
    seed: int = 7
    agent_runs: int = 0
    """Agent runs started along the jobs (3 turns, 3 tool calls each); none by default."""
    log_dir: Path | None = None
    yes_really: bool = False

    def has(self, kind: str) -> bool:
        return kind in self.faults


@dataclass(frozen=True)
class Phase:
    kind: str
    """A key of FAULT_KINDS, or "load"."""
    start: float
    """Seconds from the drill's start."""
    end: float | None = None
    """The end of a window; None for an event that happens once at ``start``."""

    def active(self, at: float) -> bool:
        return self.start <= at < (self.end if self.end is not None else self.start)

    def describe(self) -> str:
        when = (
            f"at {self.start:.0f} s" if self.end is None else f"{self.start:.0f}-{self.end:.0f} s"
        )
        return f"{self.kind} {when}"


# Fractions of the duration: (start, end or None). The 529 window is an eighth of the drill and
# the retry schedules are scaled by a quarter of it (see knobs), so the overload schedule (15,
# 60, 180 s) spans more than the window, as the real one spans more than the checklist's two
# minutes: a storm that passes is ridden out, not dead-lettered.
_SLOTS: dict[str, tuple[float, float | None]] = {
    "429": (0.05, 0.30),
    "drop": (0.10, 0.90),
    "trickle": (0.05, None),
    "budget": (0.18, 0.28),
    "reconciler": (0.34, 0.34 + RECONCILER_STOP_FRACTION),
    "529": (0.35, 0.47),
    "kill": (0.52, None),
    "flush": (0.58, None),
    "401": (0.66, None),
    "revoke": (0.70, None),
    "kill-waiting": (0.75, None),
    "long": (0.76, None),
}


def timeline(options: DrillOptions) -> list[Phase]:
    """The drill's faults in the order they start, for the options' duration and fault mix."""
    phases = []
    for kind, (start, end) in _SLOTS.items():
        if not options.has(kind):
            continue
        phase_end = None if end is None else end * options.duration
        if kind == "long":
            phase_end = start * options.duration + LONG_CALL_WINDOW_SECONDS
        phases.append(Phase(kind, start * options.duration, phase_end))
    return sorted(phases, key=lambda phase: phase.start)


def call_deadline_seconds() -> float:
    """The deadline of a drill call (128 tokens: the idle bound outweighs the generation time),
    as providers/limits.py computes it: the connect timeout plus the idle bound."""
    return CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS


def breaker_hold_seconds(options: DrillOptions) -> float:
    """How long the drill leaves the breaker open before closing it: long enough for held jobs
    to pile up, shorter than LLM_BREAKER_PROBE_SECONDS (30 s) so that no probe closes it first."""
    return max(2.0, min(10.0, 0.04 * options.duration))


@dataclass(frozen=True)
class Knob:
    setting: str
    value: str
    default: str
    why: str


def knobs(options: DrillOptions) -> list[Knob]:
    """Settings the drill sets in the environment of every process it starts, and why."""
    scale = max(0.02, 0.25 * options.duration / DEFAULT_DURATION)
    return [
        Knob(
            "LLM_RETRY_DELAY_SCALE",
            f"{scale:.3g}",
            "1",
            "the retry schedules shrink with the storms (the checklist's 5 min of 429s and 2 min "
            "of 529s become a quarter and an eighth of the drill)",
        ),
        Knob(
            "LLM_HEARTBEAT_SECONDS",
            "2",
            "10",
            "the job lock lives four beats (8 s): a killed worker's lock is gone before the "
            "stale threshold",
        ),
        Knob(
            "LLM_STALE_AFTER_SECONDS",
            f"{STALE_AFTER_SECONDS:g}",
            "45",
            f"a killed worker's jobs are recovered within seconds; the long calls "
            f"({LONG_CALL_SECONDS:g} s) outlive it",
        ),
        Knob(
            "LLM_RECONCILE_INTERVAL",
            "5",
            "10",
            "the reconciler looks every few seconds for jobs lost in the flush or left by the "
            "killed worker (not less: its stall alert fires after three intervals without a "
            "pass, and a pass under the drill's load can take seconds)",
        ),
        Knob(
            "LLM_LOST_QUEUE_GRACE_SECONDS",
            "10",
            "30",
            "a queued job missing from Redis after the flush is enqueued again within seconds",
        ),
        Knob(
            "LLM_OVERDUE_RETRY_SECONDS",
            "5",
            "15",
            "with the scheduler gone, the reconciler moves due retries itself",
        ),
        Knob(
            "LLM_PROVIDER_CONNECT_TIMEOUT",
            f"{CONNECT_TIMEOUT_SECONDS:g}",
            "10",
            "a local fake provider connects at once; the trickling call's deadline (connect + "
            "read timeout) passes before the reduced drill's kill",
        ),
        Knob(
            "LLM_STREAM_IDLE_SECONDS",
            f"{READ_TIMEOUT_SECONDS:g}",
            "60",
            "a trickling call reaches its deadline (connect + read timeout) within the drill; "
            f"the long calls ({LONG_CALL_SECONDS:g} s) stay under it",
        ),
        Knob(
            "LLM_RATE_LIMIT_MAX_WAIT_SECONDS",
            "75",
            "0.99",
            "jobs facing the kill-waiting fault's limit wait on the limiter in their worker "
            "(never longer than the 60 s window) instead of going back to the queue",
        ),
        Knob("WEB_CONCURRENCY", "1", "cores", "one web process is enough for the drill's socket"),
        Knob(
            "ALERT_MONITOR_INTERVAL",
            "5",
            "15",
            "queue conditions trigger and resolve within the drill",
        ),
    ]
