"""The Redis primary killed under Sentinel, with calls in flight and jobs waiting: two worker
hosts with four slots each (so that jobs wait on the queue), eight long calls in flight, four
jobs queued behind them and replicated, then the replica cut off from the primary and four more
submitted (on the primary only: lost with it), then ``kill -9`` of the primary's server. The
sentinels promote the replica; every process finds it by itself; the reconciler puts back the
jobs the replica had not got (docs/deploy.md#redis-sentinel)."""

import time
from collections.abc import Callable
from functools import partial

from django.contrib.auth.models import User

from chaos.cluster.redis_hosts import (
    PRIMARY_HOST,
    REPLICA_HOST,
    SENTINEL_HOSTS,
    failover_done,
    queue_lengths,
)
from chaos.cluster.scenarios import (
    QUICK_LATENCY_MS,
    SETTLE_SECONDS,
    ScenarioRecord,
    _collect,
    _submit,
    _watch,
)
from chaos.cluster.services import Cluster
from chaos.processes import wait_until
from chaos.provider import FakeProvider
from llmops.queues import LLM_QUEUE

__all__ = ["WORKER_SLOTS", "redis_kill_scenario"]

WORKER_SLOTS = 4
"""LLM_WORKER_CONCURRENCY of the scenario's workers: few, so that jobs wait on the queue."""
FAILOVER_TIMEOUT_SECONDS = 60.0


def redis_kill_scenario(
    cluster: Cluster, provider: FakeProvider, user: User, *, waiting: int, call_seconds: float,
    earlier_jobs: set[str], say: Callable[[str], None],
) -> ScenarioRecord:  # fmt: skip
    hosts = [cluster.topology["w1"], cluster.topology["w2"]]
    calls = WORKER_SLOTS * len(hosts)
    record = ScenarioRecord(
        name="kill-redis-primary",
        description=f"kill -9 of the Redis primary on {PRIMARY_HOST} with {calls} calls of "
        f"{call_seconds:g} s in flight on {' and '.join(h.name for h in hosts)} "
        f"({WORKER_SLOTS} slots each), {waiting} jobs waiting replicated and {waiting} on the "
        f"primary only (the replica cut off)",
        victim=" and ".join(h.name for h in hosts),
        started=time.time(),
        earlier_jobs=earlier_jobs,
    )
    provider.http.post("/_fake/reset").raise_for_status()
    provider.configure(faults={}, latency_ms=str(int(call_seconds * 1000)))
    for host in hosts:
        record.worker_logs.append(str(cluster.start_worker(host, concurrency=WORKER_SLOTS).log))
    for host in hosts:
        if not wait_until(partial(cluster.worker_registered, host), timeout=90, every=0.5):
            raise RuntimeError(f"the llm worker on {host.name} did not start")
    record.long_jobs = [_submit(user, i, record.name) for i in range(calls)]
    wanted = set(record.long_jobs)
    if not wait_until(lambda: wanted <= provider.calls_in_flight(), timeout=60, every=0.2):
        missing = len(wanted - provider.calls_in_flight())
        record.notes.append(f"{missing} of the long calls were not in flight in time")
    # Later calls are quick: the waiting jobs run once a slot frees.
    provider.configure(faults={}, latency_ms=QUICK_LATENCY_MS)
    record.other_jobs = [_submit(user, i, f"{record.name}-queued") for i in range(waiting)]
    time.sleep(1.0)  # replicated
    replica = cluster.topology[REPLICA_HOST]
    cluster.topology.cut_replication(replica, cluster.topology[PRIMARY_HOST])
    record.other_jobs += [_submit(user, i, f"{record.name}-unreplicated") for i in range(waiting)]
    time.sleep(0.5)
    on_primary, on_replica = queue_lengths(cluster.topology, LLM_QUEUE)
    record.notes.append(
        f"at the kill: {on_primary} RQ jobs waiting on the primary's llm queue, {on_replica} on "
        "the replica's"
    )
    cluster.kill_redis_primary()
    record.fault_at = time.time()
    cluster.topology.heal(replica)
    say(f"{record.name}: {calls} calls in flight, {2 * waiting} jobs waiting, primary killed")
    if wait_until(
        lambda: failover_done(cluster.topology, alive=SENTINEL_HOSTS),
        timeout=FAILOVER_TIMEOUT_SECONDS,
        every=0.1,
    ):
        record.failover_seconds = record.rel(time.time())
        say(f"{record.name}: {REPLICA_HOST} promoted after {record.failover_seconds:.1f} s")
    else:
        record.notes.append(f"no failover within {FAILOVER_TIMEOUT_SECONDS:g} s")
    _watch(record, record.fault_at + SETTLE_SECONDS)
    for host in hosts:
        cluster.stop_worker(host)
    _collect(cluster, provider, record)
    return record
