"""The shared rate limiter at the provider's limit across hosts: the fake provider enforcing R
requests a minute (a sliding 60 s window, then over any 5 s too), calls of 1-3 s, the
Procfile's llm worker on w1, w2 and w3 with nothing configured (each round starts from a limiter
that knows nothing: the limit is learned from the provider's headers), a backlog of jobs.
Measured as bench/ratelimit.py measures one host (chaos/rate_use.py): over ``seconds`` from the
first call, the successful calls a minute as a fraction of R and the share of 429s; the target
is at least 0.95 of R with under 1 % 429s."""

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User

from api.errors import Conflict
from chaos.checks import Check
from chaos.cluster.scenarios import ScenarioRecord, _hosts_by_ip, _submit
from chaos.cluster.services import Cluster
from chaos.processes import wait_until
from chaos.provider import FakeProvider
from chaos.rate_use import RateUse, arrival_gaps, rate_use, sent, tightest
from jobs.models import LlmJob
from jobs.services import job_cancel
from ledger.models import CostEntry
from llmops.queues import rate_limit_key
from providers.selectors import provider_name_for_model
from ratelimits.limiter import redis_client

__all__ = ["TARGET_OF_LIMIT", "TARGET_LIMITED_SHARE", "rate_limit_checks", "rate_limit_scenario"]

MODEL = "claude-haiku-4-5"
"""One model: the provider counts every request against one limit, our limiter one per model."""
LATENCY_MS = "1000-3000"
"""bench/ratelimit.py's calls: many in flight at once, so the pace, not the slots, decides."""
SHORT_INTERVALS = (None, 5.0)
"""The plain 60 s window, then the provider also enforcing R/12 over any 5 s."""
WORKER_HOSTS = ("w1", "w2", "w3")
TARGET_OF_LIMIT = 0.95
TARGET_LIMITED_SHARE = 0.01
ANSWERED_SECONDS = 4.0
"""After the span, until every call sent within it has answered (3 s at most) and is booked."""


@dataclass
class RateRound:
    short_interval: float | None
    use: RateUse
    closest: str
    """The tightest R/12 + 1 arrivals in a row (chaos/rate_use.py ``tightest``)."""
    gaps: str
    by_host: dict[str, int] = field(default_factory=dict)
    """Calls that arrived in the span per host, from the provider's own log."""
    held: dict[str, int] = field(default_factory=dict)
    """Jobs held (back on the queue, no attempt used) per host, from its worker's log."""
    provider_count: dict[str, Any] = field(default_factory=dict)

    @property
    def enforced(self) -> str:
        return f"any {self.short_interval:g} s and 60 s" if self.short_interval else "60 s"

    @property
    def passed(self) -> bool:
        return (
            self.use.of_limit >= TARGET_OF_LIMIT and self.use.limited_share < TARGET_LIMITED_SHARE
        )


def _limiter_forget() -> int:
    """Delete the model's limiter keys (window, learned limits, pause, pace...): the round
    starts as on a fresh deployment, as bench/ratelimit.py's FLUSHDB does."""
    client = redis_client()
    pattern = rate_limit_key(provider_name_for_model(model=MODEL), MODEL, "*")
    keys = list(client.scan_iter(match=pattern, count=500))
    return int(client.delete(*keys)) if keys else 0


def _cancel_waiting(job_ids: list[str]) -> int:
    """The backlog left when the round ends: cancelled, so that no later round runs it."""
    cancelled = 0
    for job in LlmJob.objects.filter(id__in=job_ids, status__in=LlmJob.WAITING_STATUSES):
        try:
            job_cancel(job=job)
            cancelled += 1
        except Conflict:
            pass  # taken meanwhile by a worker still stopping
    return cancelled


def _held(log: str) -> int:
    path = Path(log)
    return path.read_text(errors="replace").count(" held for ") if path.is_file() else 0


def _round(
    cluster: Cluster, provider: FakeProvider, user: User, record: ScenarioRecord, *, rpm: int,
    seconds: float, backlog: int, short_interval: float | None, say: Callable[[str], None],
) -> RateRound:  # fmt: skip
    provider.http.post("/_fake/reset").raise_for_status()
    limits: dict[str, Any] = {"rpm": rpm}
    if short_interval:
        limits["short_interval_seconds"] = short_interval
    provider.settings(faults={}, latency_ms=LATENCY_MS, **limits)
    _limiter_forget()
    # Three features, as bench/ratelimit.py's: the limiter shares the limit between them.
    job_ids = [_submit(user, i, f"rate-limit-{i % 3}", model=MODEL) for i in range(backlog)]
    hosts = [cluster.topology[name] for name in WORKER_HOSTS]
    logs = {host.name: str(cluster.start_worker(host).log) for host in hosts}
    entries = CostEntry.objects.filter(job_id__in=job_ids).select_related("job")
    if not wait_until(entries.exists, timeout=180, every=0.5):
        raise RuntimeError(f"rate-limit: no call in 180 s (see {', '.join(logs.values())})")
    first = min(sent(entry) for entry in entries.all())
    say(f"{record.name}: R over {short_interval or 60:g} s, the first call; {seconds:g} s measured")
    time.sleep(max(0.0, first + seconds + ANSWERED_SECONDS - time.time()))
    for host in hosts:
        cluster.stop_worker(host)
    # A call sent before the first one answered may have answered after it: the span starts
    # at the first call sent (earlier than the estimate, so every call in it has answered).
    first = min(sent(entry) for entry in entries.all())
    use = rate_use(entries.all(), first=first, seconds=seconds, rpm=rpm)
    arrivals = provider.http.get("/_fake/arrivals").raise_for_status().json()["arrivals"]
    names = _hosts_by_ip(cluster)
    calls = provider.http.get("/_fake/calls").raise_for_status().json()["calls"]
    by_host = Counter(
        names.get(call["client"], call["client"])
        for call in calls
        if first <= call["arrived"] < first + seconds
    )
    cancelled = _cancel_waiting(job_ids)
    record.notes.append(
        f"R over {short_interval or 60:g} s: {backlog} jobs submitted, {cancelled} left waiting "
        "at the end and cancelled"
    )
    return RateRound(
        short_interval=short_interval,
        use=use,
        closest=tightest(arrivals, first, first + seconds, rpm=rpm),
        gaps=arrival_gaps(arrivals, first, first + seconds, rpm=rpm),
        by_host=dict(sorted(by_host.items())),
        held={name: _held(log) for name, log in logs.items()},
        provider_count=provider.stats()["by_status"],
    )


def rate_limit_scenario(
    cluster: Cluster, provider: FakeProvider, user: User, *, rpm: int, seconds: float,
    say: Callable[[str], None],
) -> tuple[ScenarioRecord, list[RateRound]]:  # fmt: skip
    # What the workers could send in the span and more (bench/ratelimit.py's backlog).
    backlog = int(rpm * seconds / 60 * 1.4) + 50
    record = ScenarioRecord(
        name="rate-limit",
        description=f"the provider enforcing {rpm} requests a minute over 60 s, then over any "
        f"5 s too, calls of {LATENCY_MS} ms; the Procfile's llm worker on "
        f"{', '.join(WORKER_HOSTS)}, nothing configured (learned from the headers, from an "
        f"empty limiter each round); {backlog} jobs of backlog; measured over {seconds:g} s from "
        "the first call",
        victim="",
        started=time.time(),
    )
    rounds = []
    try:
        for short_interval in SHORT_INTERVALS:
            round_ = _round(
                cluster, provider, user, record, rpm=rpm, seconds=seconds, backlog=backlog,
                short_interval=short_interval, say=say,
            )  # fmt: skip
            rounds.append(round_)
            say(f"{record.name}: R over {round_.enforced}: {round_.use.summary()}")
    finally:
        # What a later scenario meets: the provider's start configuration, a limiter that
        # learned nothing from this one.
        provider.http.post("/_fake/reset").raise_for_status()
        provider.applied = {}
        _limiter_forget()
    return record, rounds


def rate_limit_checks(rounds: list[RateRound]) -> list[Check]:
    checks = []
    for round_ in rounds:
        hosts = ", ".join(f"{name} {count}" for name, count in round_.by_host.items())
        held = ", ".join(f"{name} {count}" for name, count in round_.held.items())
        figures = (
            f"{round_.use.summary()}; calls per host (the provider's log): {hosts}; jobs held "
            f"(back on the queue, no attempt used): {held}; the provider's count for the round: "
            f"{round_.provider_count}; {round_.closest}; {round_.gaps}; {round_.use.tens()}"
        )
        checks.append(
            Check(
                f"use of R over {round_.enforced} (>= {TARGET_OF_LIMIT:g} of R, "
                f"< {TARGET_LIMITED_SHARE:.0%} 429s)",
                round_.passed,
                figures,
            )
        )
    return checks
