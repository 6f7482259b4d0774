"""A Redis failover under Sentinel on the real stack: a primary, a replica and three sentinels
(tests/redis_sentinel.py), a real `manage.py rqworker llm --with-scheduler` process reaching
Redis through a redis+sentinel:// REDIS_URL, the API and a WebSocket of this process through
the same settings (llmops/redis_config.py), the fake provider over HTTP and MariaDB.

The primary is killed with -9 while two calls are in flight and two more jobs wait on a queue
it had not replicated; the sentinels promote the replica. Without a restart of anything, the
calls in flight are recorded, the reconciler puts back the two jobs the failover lost, a job
submitted after it runs, and the WebSocket opened before it hears every one of them complete.
"""

import asyncio
import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import channel_layers, get_channel_layer
from django.utils import timezone

from jobs.models import LlmJob
from jobs.reconciler import reconcile_jobs
from keys.testing import api_key_for
from ledger.models import CostEntry
from llmops.queues import LLM_QUEUE
from llmops.redis_config import redis_server
from ops.health import readiness
from tests.conftest import FakeProvider, submit
from tests.jobs.test_events import communicator
from tests.jobs.test_takeover import Processes, processes, wait_for, worker_env  # noqa: F401
from tests.redis_sentinel import MASTER, SentinelGroup, sentinel_group

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices"),
    pytest.mark.slow,
]

CALL_SECONDS = 4
"""How long each call in flight at the kill takes: past the failover's few seconds."""


@pytest.fixture
def through_sentinel(settings: Any, tmp_path: Path) -> Iterator[SentinelGroup]:
    """A sentinel group, and this process's queues and channel layer on its primary, built by
    the settings' own rule from its redis+sentinel:// URL."""
    with sentinel_group(tmp_path / "redis") as group:
        server = redis_server(group.url)
        connection = server.rq_connection(
            settings.LLM_REDIS_SOCKET_TIMEOUT, settings.LLM_REDIS_CONNECT_TIMEOUT
        )
        settings.RQ_QUEUES = {
            name: {**connection, "DEFAULT_TIMEOUT": config["DEFAULT_TIMEOUT"]}
            for name, config in settings.RQ_QUEUES.items()
        }
        layers = copy.deepcopy(settings.CHANNEL_LAYERS)
        layers["default"]["CONFIG"]["hosts"] = [
            server.channel_layer_host(settings.CHANNEL_LAYER_SOCKET_TIMEOUT, connect_timeout=5)
        ]
        settings.CHANNEL_LAYERS = layers
        channel_layers.backends.clear()
        try:
            yield group
        finally:
            channel_layers.backends.clear()


def status_of(job: LlmJob) -> str:
    return str(LlmJob.objects.values_list("status", flat=True).get(id=job.id))


def all_running(jobs: list[LlmJob]) -> bool:
    return all(status_of(job) == LlmJob.Status.RUNNING for job in jobs)


async def completions(comm: Any, expected: set[str], *, timeout: float) -> set[str]:
    """The ids of the expected jobs whose completion the socket announces within ``timeout``."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while not expected <= seen and time.monotonic() < deadline:
        try:
            event = await comm.receive_json_from(timeout=max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            break
        if event["type"] == "job.updated" and event["job"]["status"] == "completed":
            seen.add(str(event["job"]["id"]))
    return seen


def test_a_worker_the_api_and_a_socket_carry_on_through_a_failover_and_lost_jobs_come_back(
    alice: Any,
    alice_client: Any,
    fake_provider: FakeProvider,
    through_sentinel: SentinelGroup,
    processes: Processes,  # noqa: F811
    settings: Any,
) -> None:
    group = through_sentinel
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0  # the reconciler's pass below looks at once
    # The worker finds the sentinels by the variables, this process by the URL: both forms.
    sentinels = {
        "REDIS_URL": "redis://unused/0",
        "REDIS_SENTINELS": ",".join(group.sentinels),
        "REDIS_SENTINEL_MASTER": MASTER,
    }
    worker = processes.start(
        worker_env(fake_provider, LLM_WORKER_CONCURRENCY="2", **sentinels),
        "rqworker",
        LLM_QUEUE,
        "--with-scheduler",
    )

    async def scenario() -> dict[str, Any]:
        comm = communicator(key=await sync_to_async(api_key_for)(alice))
        connected, _ = await comm.connect()
        assert connected
        first = await sync_to_async(submit)(alice_client)
        before = await completions(comm, {str(first.id)}, timeout=60)
        assert before == {str(first.id)}, processes.logs()

        await sync_to_async(fake_provider.faults)({}, latency_ms=str(CALL_SECONDS * 1000))
        in_flight = [await sync_to_async(submit)(alice_client) for _ in range(2)]
        await sync_to_async(wait_for)(
            lambda: all_running(in_flight), timeout=20, what=f"two calls\n{processes.logs()}"
        )
        # Two more wait behind them (both of the worker's threads are busy), on a queue the
        # replica never hears of: the primary dies with them.
        group.cut_replication()
        lost = [await sync_to_async(submit)(alice_client) for _ in range(2)]
        killed_at = timezone.now()
        group.kill_primary()
        failover_seconds = await sync_to_async(group.wait_for_failover)()
        await sync_to_async(fake_provider.faults)({}, latency_ms="0")

        # The API of this process submits through the new primary, as it is.
        after = await sync_to_async(submit)(alice_client)
        # The lost two are found by the reconciler (the database is the truth) and put back.
        await sync_to_async(wait_for)(
            lambda: all(status_of(job) != LlmJob.Status.RUNNING for job in in_flight),
            timeout=30,
            what=f"the calls in flight to be recorded\n{processes.logs()}",
        )
        report = await sync_to_async(reconcile_jobs)()
        expected = {str(job.id) for job in [*in_flight, *lost, after]}
        seen = await completions(comm, expected, timeout=45)
        await comm.disconnect()
        return {
            "killed_at": killed_at,
            "failover": failover_seconds,
            "in_flight": [job.id for job in in_flight],
            "report": report,
            "seen": seen,
            "expected": expected,
        }

    outcome = async_to_sync(scenario)()

    # The calls were in flight across the whole failover, and were recorded after it.
    assert outcome["failover"] < CALL_SECONDS
    ends = LlmJob.objects.filter(id__in=outcome["in_flight"]).values_list("completed_at", flat=True)
    assert all(end is not None and end > outcome["killed_at"] for end in ends)
    assert outcome["report"].requeued_lost == 2, (str(outcome["report"]), processes.logs())
    assert outcome["seen"] == outcome["expected"], processes.logs()
    assert LlmJob.objects.exclude(status=LlmJob.Status.COMPLETED).count() == 0
    # Every call ran once: one ledger row each, as many calls as the provider saw.
    assert CostEntry.objects.count() == LlmJob.objects.count() == 6
    assert fake_provider.stats()["requests"] == 6
    # The same worker process did it all, without a restart.
    assert worker.poll() is None, processes.logs()
    assert "quitting" not in processes.output(), processes.logs()
    assert "raised an exception" not in processes.output(), processes.logs()  # its scheduler


def test_the_channel_layer_of_a_process_carries_events_after_a_failover(
    through_sentinel: SentinelGroup,
) -> None:
    """One channel layer, as a web process holds it: a group send reaches a receiver before the
    primary dies and, on the same layer, after the replica took over. /readyz's Redis check
    asks the sentinels too."""
    group = through_sentinel
    assert readiness().checks["redis"]["ok"]

    async def scenario() -> list[Any]:
        layer = get_channel_layer()
        assert layer is not None
        channel = await layer.new_channel()
        await layer.group_add("failover", channel)
        await layer.group_send("failover", {"type": "job.updated", "n": 1})
        received = [await asyncio.wait_for(layer.receive(channel), timeout=5)]
        # Its taking off the channel replicated first: a write the replica never had comes back
        # after a failover (the first message, delivered twice in a CI run), as any lost write
        # does; what this checks is that the layer carries on.
        await sync_to_async(group.wait_replicated)()
        group.kill_primary()
        await sync_to_async(group.wait_for_failover)()
        await layer.group_send("failover", {"type": "job.updated", "n": 2})
        received.append(await asyncio.wait_for(layer.receive(channel), timeout=15))
        return received

    received = async_to_sync(scenario)()
    assert [message["n"] for message in received] == [1, 2]
    assert readiness().checks["redis"]["ok"]
