"""The drill's scenarios on the worker hosts, each on a fresh bill (the provider is reset first):

- a path frozen: long calls in flight on one worker host, a healthy worker host beside it, its
  database path, its Redis path or every path frozen for a while, then healed;
- a host killed: long calls in flight on it, every process on it killed at once.

Each returns a ``ScenarioRecord``: the jobs, the provider's calls (who sent which job's call,
when) and bill, and when things happened, for chaos/cluster/checks.py.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User

from chaos.cluster.services import Cluster
from chaos.cluster.topology import Host
from chaos.processes import wait_until
from chaos.provider import BilledCall, FakeProvider
from jobs.models import LlmJob
from jobs.services import job_submit

__all__ = ["ProviderCall", "ScenarioRecord", "freeze_scenario", "kill_scenario"]

MODELS = ("claude-haiku-4-5", "claude-sonnet-4-6")
QUICK_LATENCY_MS = "100-400"
"""Every call but the long ones: the healthy host's work and any second call."""
SETTLE_SECONDS = 150.0
"""After the heal (or the kill), how long the drill waits for every job to end: two minutes is
the promise, the rest is room to see how late the stragglers are."""
STUCK_SECONDS = 120.0


@dataclass(frozen=True)
class ProviderCall:
    job_id: str
    host: str
    """The host that sent it (from the client address the provider saw)."""
    arrived: float
    ended: float


@dataclass
class ScenarioRecord:
    name: str
    description: str
    victim: str
    started: float = 0.0
    """Wall clock; the times below are seconds from the fault (freeze or kill)."""
    fault_at: float = 0.0
    heal_at: float | None = None
    long_jobs: list[str] = field(default_factory=list)
    other_jobs: list[str] = field(default_factory=list)
    final_at: dict[str, float] = field(default_factory=dict)
    """Job id -> seconds from the fault when the drill first saw it final."""
    statuses: dict[str, str] = field(default_factory=dict)
    calls: list[ProviderCall] = field(default_factory=list)
    billing: list[BilledCall] = field(default_factory=list)
    provider_stats: dict[str, Any] = field(default_factory=dict)
    killed_pids: list[int] = field(default_factory=list)
    victim_log: str = ""
    """The log of the victim host's llm worker: where it says when it cut its own calls off."""
    worker_logs: list[str] = field(default_factory=list)
    """The logs of the other llm workers, read the same way."""
    failover_seconds: float | None = None
    """From the Redis primary's kill until the sentinels named the replica and it was one."""
    earlier_jobs: set[str] = field(default_factory=set)
    """Jobs not final when the drill started (an earlier run's): its workers run them too, and
    their calls and rows are counted with the scenario's bill."""
    notes: list[str] = field(default_factory=list)

    @property
    def job_ids(self) -> list[str]:
        return self.long_jobs + self.other_jobs

    def rel(self, wall: float) -> float:
        return wall - self.fault_at


def _submit(user: User, index: int, tag: str, *, model: str | None = None) -> str:
    """A short job of the feature ``cluster-<tag>``, of ``model`` or of MODELS in turn."""
    job, _ = job_submit(
        user=user,
        data={
            "feature": f"cluster-{tag}",
            "model": model or MODELS[index % len(MODELS)],
            "messages": [{"role": "user", "content": f"Cluster drill {tag} job {index}."}],
            "max_tokens": 128,
        },
    )
    return str(job.id)


def _submit_stream(user: User, index: int, *, feature: str, model: str, tokens: int) -> str:
    """A job whose answer is ``tokens`` long (the fake provider's ``fake_output_tokens``),
    streamed at the provider's pace."""
    job, _ = job_submit(
        user=user,
        data={
            "feature": feature,
            "model": model,
            "messages": [
                {"role": "user", "content": f"Stream {index}. fake_output_tokens={tokens}"}
            ],
            "max_tokens": tokens,
        },
    )
    return str(job.id)


def _hosts_by_ip(cluster: Cluster) -> dict[str, str]:
    return {host.ip: host.name for host in cluster.topology.hosts.values()}


def _start_long_calls(
    cluster: Cluster, provider: FakeProvider, user: User, victim: Host, record: ScenarioRecord,
    *, calls: int, call_seconds: float,
) -> None:  # fmt: skip
    """``calls`` calls of ``call_seconds`` in flight on ``victim`` (its worker alone runs)."""
    provider.http.post("/_fake/reset").raise_for_status()
    provider.configure(faults={}, latency_ms=str(int(call_seconds * 1000)))
    record.victim_log = str(cluster.start_worker(victim).log)
    if not wait_until(lambda: cluster.worker_registered(victim), timeout=90, every=0.5):
        raise RuntimeError(f"the llm worker on {victim.name} did not start")
    record.long_jobs = [_submit(user, i, record.name) for i in range(calls)]
    wanted = set(record.long_jobs)
    if not wait_until(lambda: wanted <= provider.calls_in_flight(), timeout=60, every=0.2):
        missing = len(wanted - provider.calls_in_flight())
        record.notes.append(f"{missing} of the long calls were not in flight in time")
    provider.configure(faults={}, latency_ms=QUICK_LATENCY_MS)


def _watch(
    record: ScenarioRecord, until: float, *, tick: Callable[[float], None] | None = None
) -> None:
    """Note when each job is first seen final, until ``until`` (wall clock) or all are."""
    while True:
        now = time.time()
        left = [job for job in record.job_ids if job not in record.final_at]
        if left:
            for job_id in LlmJob.objects.filter(
                id__in=left, status__in=LlmJob.FINAL_STATUSES
            ).values_list("id", flat=True):
                record.final_at[str(job_id)] = record.rel(now)
        if tick:
            tick(now)
        if now >= until or (len(record.final_at) == len(record.job_ids) and tick is None):
            return
        time.sleep(1.0)


def _collect(cluster: Cluster, provider: FakeProvider, record: ScenarioRecord) -> None:
    record.statuses = {
        str(job_id): status
        for job_id, status in LlmJob.objects.filter(id__in=record.job_ids).values_list(
            "id", "status"
        )
    }
    mine, hosts = set(record.job_ids), _hosts_by_ip(cluster)
    raw = provider.http.get("/_fake/calls").raise_for_status().json()["calls"]
    record.calls = [
        ProviderCall(c["idempotency_key"], hosts.get(c["client"], c["client"]), c["arrived"],
                     c["ended"])
        for c in raw
        if c["idempotency_key"] in mine and c["arrived"] >= record.started
    ]  # fmt: skip
    record.billing = [
        call for call in provider.billing() if call.job_id in mine | record.earlier_jobs
    ]
    record.provider_stats = provider.stats()


def _long_calls_beside_a_healthy_host(
    cluster: Cluster, provider: FakeProvider, user: User, *, name: str, fault: str, calls: int,
    call_seconds: float, earlier_jobs: set[str],
) -> tuple[Host, Host, ScenarioRecord]:  # fmt: skip
    """The start of a worker host's scenario: ``calls`` long calls in flight on w1 (the victim)
    and w2's worker running beside it; the fault comes next."""
    victim, healthy = cluster.topology["w1"], cluster.topology["w2"]
    record = ScenarioRecord(
        name=name,
        description=f"{fault} with {calls} calls of {call_seconds:g} s in flight on "
        f"{victim.name}, {healthy.name} healthy beside it",
        victim=victim.name,
        started=time.time(),
        earlier_jobs=earlier_jobs,
    )
    _start_long_calls(
        cluster, provider, user, victim, record, calls=calls, call_seconds=call_seconds
    )
    cluster.start_worker(healthy)
    wait_until(lambda: cluster.worker_registered(healthy), timeout=90, every=0.5)
    return victim, healthy, record


def freeze_scenario(
    cluster: Cluster, provider: FakeProvider, user: User, *, path: str, calls: int,
    call_seconds: float, freeze_seconds: float, earlier_jobs: set[str],
    say: Callable[[str], None],
) -> ScenarioRecord:  # fmt: skip
    victim, healthy, record = _long_calls_beside_a_healthy_host(
        cluster, provider, user, name=f"freeze-{path}",
        fault=f"{path} path of w1 frozen {freeze_seconds:g} s",
        calls=calls, call_seconds=call_seconds, earlier_jobs=earlier_jobs,
    )  # fmt: skip
    cluster.topology.freeze(victim, path)
    record.fault_at = time.time()
    say(f"{record.name}: {calls} long calls in flight on {victim.name}, frozen")
    heal_at = record.fault_at + freeze_seconds
    # The healthy host's share: jobs submitted through the first half of the freeze.
    submitted = 0

    def tick(now: float) -> None:
        nonlocal submitted
        due = min(calls, int((now - record.fault_at) / (freeze_seconds / 2) * calls) + 1)
        while submitted < due:
            record.other_jobs.append(_submit(user, submitted, f"{record.name}-more"))
            submitted += 1

    _watch(record, heal_at, tick=tick)
    cluster.topology.heal(victim)
    record.heal_at = record.rel(time.time())
    say(f"{record.name}: healed after {record.heal_at:.0f} s")
    _watch(record, time.time() + SETTLE_SECONDS)
    cluster.stop_worker(victim)
    cluster.stop_worker(healthy)
    _collect(cluster, provider, record)
    return record


def kill_scenario(
    cluster: Cluster, provider: FakeProvider, user: User, *, calls: int, call_seconds: float,
    earlier_jobs: set[str], say: Callable[[str], None],
) -> ScenarioRecord:  # fmt: skip
    victim, healthy, record = _long_calls_beside_a_healthy_host(
        cluster, provider, user, name="kill-host",
        fault="every process on w1 killed at once",
        calls=calls, call_seconds=call_seconds, earlier_jobs=earlier_jobs,
    )  # fmt: skip
    record.killed_pids = cluster.kill_host(victim)
    record.fault_at = time.time()
    say(f"{record.name}: killed {len(record.killed_pids)} processes on {victim.name}")
    _watch(record, time.time() + SETTLE_SECONDS)
    cluster.stop_worker(healthy)
    _collect(cluster, provider, record)
    return record
