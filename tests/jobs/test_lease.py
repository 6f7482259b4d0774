"""The self-fencing lease (jobs/heartbeat.py ``lease_seconds``) and its system check (jobs.E003):
always below the earliest takeover (the lock's ttl and the stale threshold), never below a beat."""

import pytest

from jobs.checks import lease_problems
from jobs.leases import lease_seconds, lock_ttl


@pytest.mark.parametrize(
    ("beat", "stale", "lease"),
    [
        (10, 45, 20),  # the defaults: a 40 s lock less two beats
        (2, 10, 4),  # the chaos drill's knobs
        (10, 30, 15),  # a short stale threshold: 30 s less two beats (never below 1.5 beats)
        (0.5, 45, 1),  # the 2 s floor of the lock's ttl
    ],
)
def test_the_derived_lease_ends_before_any_takeover(settings, beat, stale, lease):
    settings.LLM_HEARTBEAT_SECONDS, settings.LLM_STALE_AFTER_SECONDS = beat, stale
    settings.LLM_LEASE_SECONDS = 0
    assert lease_seconds() == pytest.approx(lease)
    assert beat <= lease_seconds() < min(lock_ttl(), stale)
    assert lease_problems() == []


def test_a_lease_that_outlives_the_lock_or_undercuts_a_beat_is_refused(settings):
    settings.LLM_HEARTBEAT_SECONDS, settings.LLM_STALE_AFTER_SECONDS = 10, 45
    settings.LLM_LEASE_SECONDS = 40  # the lock's ttl: a takeover could come first
    (problem,) = lease_problems()
    assert "below the job lock's ttl (40 s" in problem
    settings.LLM_LEASE_SECONDS = 5  # under a beat: a healthy host would fence itself
    assert lease_problems()
    settings.LLM_LEASE_SECONDS = 25
    assert lease_problems() == [] and lease_seconds() == 25
