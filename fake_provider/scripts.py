"""Scripted answers: the next calls answer as told, in order, then the configuration resumes.

A fault rate is a dice roll shared by every caller; a demo or a test wants one job to meet a
429 and then succeed, or to be refused once and succeed when requeued. A script is a list of
steps, each ``"ok"`` (answered, whatever faults are configured) or a fault code, optionally with
its own latency: ``["429", "ok"]``, ``[{"answer": "529", "latency_ms": 4000}, "ok"]``.

Scripted under a ``key``, only the calls carrying that ``Idempotency-Key`` take its steps (our
workers send the job id): two people's jobs never take each other's faults, and a job's
retries walk its script one call at a time. Without a key the script is the shared one: the next
calls of anyone. A keyed script left unused (its job was cancelled before calling) lapses after
``KEY_TTL_SECONDS``.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .codes import FAULT_CODES, parse_latency

__all__ = ["KEY_TTL_SECONDS", "MAX_STEPS", "Scripts", "Step", "parse_key", "parse_script"]

KEY_TTL_SECONDS = 3600.0
MAX_KEYS = 10_000
"""Keyed scripts kept at most (the oldest go first): a forgotten demo stays bounded."""
MAX_STEPS = 100


@dataclass(frozen=True)
class Step:
    answer: str
    """``ok`` or a fault code (fake_provider/state.py ``FAULT_CODES``)."""
    latency_ms: tuple[int, int] | None = None
    """None: the configured latency."""

    @property
    def fault(self) -> str | None:
        return None if self.answer == "ok" else self.answer

    def delay(self, rng: random.Random) -> float:
        low, high = self.latency_ms or (0, 0)
        return (low if low == high else rng.uniform(low, high)) / 1000.0

    def describe(self) -> Any:
        if self.latency_ms is None:
            return self.answer
        low, high = self.latency_ms
        return {"answer": self.answer, "latency_ms": str(low) if low == high else f"{low}-{high}"}


def _step(value: Any) -> Step:
    latency = None
    if isinstance(value, dict):
        if set(value) - {"answer", "latency_ms"} or "answer" not in value:
            raise ValueError("a step object has an answer and optionally latency_ms")
        if "latency_ms" in value:
            latency = parse_latency(value["latency_ms"])
        value = value["answer"]
    answer = str(value).strip().lower() if isinstance(value, (str, int)) else ""
    if isinstance(value, bool) or (answer != "ok" and answer not in FAULT_CODES):
        raise ValueError(f"a step is ok or a fault code ({', '.join(FAULT_CODES)}), not {value!r}")
    return Step(answer, latency)


def parse_script(value: Any) -> tuple[Step, ...]:
    """A list of steps (empty: none left); raises ValueError."""
    if not isinstance(value, list) or len(value) > MAX_STEPS:
        raise ValueError(f"next must be a list of at most {MAX_STEPS} steps")
    return tuple(_step(item) for item in value)


def parse_key(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 255:
        raise ValueError("key must be an Idempotency-Key: a string of 1 to 255 characters")
    return value


class Scripts:
    """The shared script and the keyed ones of one fake provider (its single event loop)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.shared: deque[Step] = deque()
        self.keyed: OrderedDict[str, tuple[float, deque[Step]]] = OrderedDict()

    def arm(self, steps: tuple[Step, ...], key: str | None = None) -> None:
        """Replace the shared script, or ``key``'s (an empty one removes it)."""
        if key is None:
            self.shared = deque(steps)
            return
        self.keyed.pop(key, None)
        if steps:
            self.keyed[key] = (self._clock() + KEY_TTL_SECONDS, deque(steps))
            while len(self.keyed) > MAX_KEYS:
                self.keyed.popitem(last=False)

    def take(self, key: str = "") -> Step | None:
        """The step this call answers by: its key's next, else the shared next, else None."""
        self._lapse()
        if key and key in self.keyed:
            _, steps = self.keyed[key]
            step = steps.popleft()
            if not steps:
                del self.keyed[key]
            return step
        return self.shared.popleft() if self.shared else None

    def describe(self) -> dict[str, Any]:
        self._lapse()
        return {
            "next": [step.describe() for step in self.shared],
            "keys": {
                key: [step.describe() for step in steps] for key, (_, steps) in self.keyed.items()
            },
        }

    def _lapse(self) -> None:
        now = self._clock()
        # Insertion order is expiry order (every script lives as long): the oldest first.
        while self.keyed:
            key, (expires, _) = next(iter(self.keyed.items()))
            if expires > now:
                break
            del self.keyed[key]
