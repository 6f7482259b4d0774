"""The lengths of a running attempt's claim, from the settings alone (no models: the settings
checks import it before Django is set up, llmops/checks.py): the job lock's ttl and the
self-fencing lease (jobs/heartbeat.py)."""

import math

from django.conf import settings

__all__ = ["lease_seconds", "lock_ttl"]


def lock_ttl() -> int:
    """The job lock's ttl: long enough to survive a missed heartbeat or two, short enough that a
    killed worker's lock is gone well before the reconciler looks (LLM_STALE_AFTER_SECONDS)."""
    return max(2, math.ceil(settings.LLM_HEARTBEAT_SECONDS * 4))


def lease_seconds() -> float:
    """How long an attempt runs with its claim renewed on neither path before it fences itself:
    ``LLM_LEASE_SECONDS``, or by default the lock's ttl (or the stale threshold, if shorter) less
    two beats (20 s), and never less than a beat and a half (a healthy claim renews within one).
    A takeover needs both the lock lapsed and the row stale, so a lease below both ends first
    (jobs/checks.py refuses settings where it cannot be)."""
    if settings.LLM_LEASE_SECONDS:
        return float(settings.LLM_LEASE_SECONDS)
    beat = settings.LLM_HEARTBEAT_SECONDS
    first_takeover = min(lock_ttl(), settings.LLM_STALE_AFTER_SECONDS)
    return max(first_takeover - 2 * beat, 1.5 * beat)
