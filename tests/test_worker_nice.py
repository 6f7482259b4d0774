"""Workers yield the CPU to the web processes on a shared host (WORKER_NICE, runtime/workers.py):
real `manage.py rqworker` processes, as the Procfile starts them, take the configured niceness."""

import os
import time
from pathlib import Path

import pytest

from llmops.queues import ALERTS_QUEUE, DEFAULT_QUEUE, LLM_QUEUE
from tests.conftest import FakeProvider
from tests.jobs.test_takeover import Processes, processes, worker_env  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True)]


def niceness(pid: int) -> int:
    # /proc/<pid>/stat: the command name is in parentheses and may hold spaces; nice is the
    # 17th field after it.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


def settled_niceness(pid: int, started: Processes) -> int:
    """The worker's niceness once it has built its worker object (it logs its start then)."""
    deadline = time.monotonic() + 60
    while "started with PID" not in started.output():
        assert time.monotonic() < deadline, started.logs()
        time.sleep(0.2)
    return niceness(pid)


@pytest.mark.parametrize("queues", [[LLM_QUEUE], [DEFAULT_QUEUE, ALERTS_QUEUE]])
def test_every_worker_takes_the_configured_niceness(
    processes: Processes,  # noqa: F811
    fake_provider: FakeProvider,
    queues: list[str],
) -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    env = worker_env(fake_provider)
    env.pop("WORKER_NICE", None)  # the default
    expected = max(own, 10)
    if own >= 10:  # a runner already niced: ask for more, to see the worker take it
        env["WORKER_NICE"] = str(expected := min(own + 5, 19))
    worker = processes.start(env, "rqworker", *queues, "--with-scheduler")
    assert settled_niceness(worker.pid, processes) == expected


def test_worker_nice_zero_leaves_the_priority_alone(
    processes: Processes,  # noqa: F811
    fake_provider: FakeProvider,
) -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    worker = processes.start(worker_env(fake_provider, WORKER_NICE="0"), "rqworker", LLM_QUEUE)
    assert settled_niceness(worker.pid, processes) == own
