"""Every wait on the job path has a bound besides the call's own deadline: Redis commands (a
socket timeout on every client of the queues, the workers and the job path) and a thread-pool
worker's wait for a database connection slot (runtime/db_connections.py). On the real stack:
real Redis, MariaDB and `manage.py rqworker` processes.
"""

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import django_rq
import pytest
from django.conf import settings as django_settings
from django_rq.workers import get_worker
from rq import Worker
from rq.command import send_shutdown_command
from rq.job import JobStatus

from llmops.queues import LLM_QUEUE
from runtime.redis_clients import queue_connection
from tests.conftest import FakeProvider
from tests.jobs.test_takeover import Processes, wait_for, worker_env

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def test_every_queue_client_has_socket_timeouts_and_a_worker_idles_past_them(
    settings, fake_provider, processes
):
    # Every client django-rq builds for a queue, and the job path's shared one, has both bounds.
    clients = [django_rq.get_connection(name) for name in settings.RQ_QUEUES]
    for client in [*clients, queue_connection(LLM_QUEUE)]:
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == settings.LLM_REDIS_SOCKET_TIMEOUT
        assert kwargs["socket_connect_timeout"] == settings.LLM_REDIS_CONNECT_TIMEOUT
    # The thread-pool worker keeps them (it blocks on the queue a second at a time); rq raises
    # the forking worker's own to cover its blocking dequeue of minutes.
    settings.LLM_WORKER_CONCURRENCY = 4
    threaded = get_worker(LLM_QUEUE).connection.connection_pool.connection_kwargs
    assert threaded["socket_timeout"] == settings.LLM_REDIS_SOCKET_TIMEOUT
    forking = get_worker("default", "alerts")
    assert forking.connection.connection_pool.connection_kwargs["socket_timeout"] > (
        forking.dequeue_timeout
    )
    # The channel layer has its own, above channels-redis's blocking receive of 5 s: a quiet
    # WebSocket's receive must never time out (tests/jobs/test_sockets.py keeps one open).
    (host,) = django_settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"]
    assert host["socket_timeout"] == django_settings.CHANNEL_LAYER_SOCKET_TIMEOUT > 5

    # A thread-pool worker with a 3 s socket timeout idles three times that long: its blocking
    # dequeue (a second at a time), rq's command listener and the scheduler live through it.
    worker = processes.start(
        worker_env(fake_provider, LLM_WORKER_CONCURRENCY="4", LLM_REDIS_SOCKET_TIMEOUT="3"),
        "rqworker",
        LLM_QUEUE,
        "--with-scheduler",
    )
    queue = django_rq.get_queue(LLM_QUEUE)
    wait_for(lambda: Worker.all(queue=queue), timeout=30, what=f"the worker\n{processes.logs()}")
    time.sleep(9)
    later = queue.enqueue_in(timedelta(seconds=1), "operator.add", 2, 3)
    wait_for(
        lambda: later.get_status(refresh=True) == JobStatus.FINISHED,
        timeout=15,
        what=f"the scheduled job to run\n{processes.logs()}",
    )
    (name,) = [w.name for w in Worker.all(queue=queue)]
    send_shutdown_command(queue.connection, name)
    assert worker.wait(timeout=15) == 0, processes.logs()
    output = processes.output()
    assert "Timeout" not in output and "could not connect to Redis" not in output, output


def test_a_thread_waits_for_a_database_slot_no_longer_than_its_bound(
    fake_provider: FakeProvider, processes: Processes
) -> None:
    queue = django_rq.get_queue(LLM_QUEUE)
    holder = queue.enqueue("tests.jobs.worker_probes.hold_a_database_connection", 6.0)
    waiter = queue.enqueue("tests.jobs.worker_probes.hold_a_database_connection", 0.0)
    worker = processes.start(
        worker_env(
            fake_provider,
            LLM_WORKER_CONCURRENCY="2",
            LLM_WORKER_DB_CONNECTIONS="1",
            LLM_WORKER_DB_SLOT_WAIT_SECONDS="1",
        ),
        "rqworker",
        LLM_QUEUE,
        "--burst",
    )
    wait_for(
        lambda: waiter.get_status(refresh=True) == JobStatus.FAILED,
        timeout=20,
        what=f"the waiting job to give up\n{processes.logs()}",
    )
    # It gave up while the holder still held the only slot, with an error that says why.
    assert holder.get_status(refresh=True) == JobStatus.STARTED
    result: Any = waiter.latest_result()
    assert "ConnectionSlotTimeout" in result.exc_string
    assert "no database connection slot came free in 1 s" in result.exc_string
    assert worker.wait(timeout=30) == 0, processes.logs()
    assert holder.get_status(refresh=True) == JobStatus.FINISHED
