"""The RQ worker class every `manage.py rqworker` uses (settings.RQ["WORKER_CLASS"]): `LlmWorker`.

A worker on the `llm` queue alone runs up to `LLM_WORKER_CONCURRENCY` jobs at once on threads
(runtime/threaded_worker.py): an LLM call waits seconds on the network, and a process per call in
flight would cost a whole interpreter each. A worker on the `agents` queue alone does the same
with up to `LLM_AGENT_WORKER_CONCURRENCY` tool tasks (agent runs' tool calls, each bounded by its
own timeout). Every other worker (`rqworker default alerts`), and either of those with its
concurrency at 1, is rq's forking worker: alert deliveries rely on rq's own job timeouts, which
only a work horse process can enforce.
"""

import importlib
import os
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from rq import Worker

from llmops.queues import AGENTS_QUEUE, LLM_QUEUE
from runtime.db_connections import bound_database_waits
from runtime.redis_clients import named_once
from runtime.threaded_worker import ThreadedWorker

__all__ = [
    "LlmWorker",
    "PreloadingWorker",
    "ThreadedLlmWorker",
    "lower_cpu_priority",
    "runs_on_threads",
    "thread_concurrency",
]

# Task modules imported once in the worker's main process, so that each forked work horse
# inherits them (and, on the llm queue, the provider's SDK: see ``warm_up``), instead of a fresh
# import in every fork adding to every job.
PRELOADED_TASK_MODULES = ("jobs.tasks", "alerts.tasks", "dlq.tasks", "agents.tasks")


class PreloadingWorker(Worker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        lower_cpu_priority()
        bound_database_waits()  # a frozen database path fails a beat, never hangs it
        for module in PRELOADED_TASK_MODULES:
            importlib.import_module(module)
        if LLM_QUEUE in _queue_names(args[0] if args else kwargs.get("queues", ())):
            # Only a worker that makes provider calls loads the SDK (about two seconds of CPU).
            from providers.registry import warm_up_providers

            warm_up_providers()
        super().__init__(*args, **kwargs)
        named_once(self.connection)  # a work horse opens its own connections for every job


def lower_cpu_priority() -> None:
    """Yield the CPU to the web processes on a shared host: take niceness `WORKER_NICE`, once per
    process (its forks and threads inherit it). Never raises the priority."""
    if settings.WORKER_NICE and os.getpriority(os.PRIO_PROCESS, 0) < settings.WORKER_NICE:
        os.nice(settings.WORKER_NICE - os.getpriority(os.PRIO_PROCESS, 0))


def _queue_names(queues: Iterable[Any] | str) -> list[str]:
    return [queues] if isinstance(queues, str) else [getattr(q, "name", q) for q in queues]


def thread_concurrency(queues: Iterable[Any] | str) -> int | None:
    """How many jobs a worker on these queues (names or Queue objects) runs at once on threads;
    None: one at a time, forking (any other queues, or a concurrency of 1)."""
    names = _queue_names(queues)
    if names == [LLM_QUEUE]:
        concurrency = settings.LLM_WORKER_CONCURRENCY
    elif names == [AGENTS_QUEUE]:
        concurrency = settings.LLM_AGENT_WORKER_CONCURRENCY
    else:
        return None
    return concurrency if concurrency > 1 else None


def runs_on_threads(queues: Iterable[Any] | str) -> bool:
    """Whether a worker on these queues (names or Queue objects) runs its jobs on threads."""
    return thread_concurrency(queues) is not None


class LlmWorker(PreloadingWorker):
    """settings.RQ["WORKER_CLASS"]: a `ThreadedLlmWorker` on the llm (or the agents) queue
    alone, this forking worker on any other queues. One class for every `rqworker` command
    line, chosen here because django-rq builds each worker from the same setting."""

    def __new__(cls, queues: Any = (), *args: Any, **kwargs: Any) -> "LlmWorker":
        if cls is LlmWorker and runs_on_threads(queues):
            return super().__new__(ThreadedLlmWorker)
        return super().__new__(cls)


class ThreadedLlmWorker(ThreadedWorker, LlmWorker):
    """The llm queue's worker: the task modules and the SDK client loaded once, as for the
    forking worker, then up to `LLM_WORKER_CONCURRENCY` jobs at once on threads. On the agents
    queue: up to `LLM_AGENT_WORKER_CONCURRENCY` tool tasks, and no SDK."""

    def __init__(self, queues: Any = (), *args: Any, **kwargs: Any) -> None:
        if kwargs.get("concurrency") is None:
            kwargs["concurrency"] = thread_concurrency(queues) or 1
        super().__init__(queues, *args, **kwargs)
        self.tool_fork_server = (
            _queue_names(queues) == [AGENTS_QUEUE] and settings.LLM_AGENT_TOOL_FORK_SERVER
        )

    def work(self, *args: Any, **kwargs: Any) -> bool:
        """On the agents queue: the tool calls fork from a fork server, a copy of this process
        made as it starts to work, not from the process itself while its threads run
        (agents/fork_server.py); stopped when the work ends."""
        if not self.tool_fork_server:
            return super().work(*args, **kwargs)
        from agents.fork_server import fork_server_stop
        from agents.tools import tool_fork_server_start

        tool_fork_server_start()
        try:
            return super().work(*args, **kwargs)
        finally:
            fork_server_stop()
