"""The threaded worker's jobs in flight: who records each one's end in rq, and the monitor.

``JobMonitorWorker`` is the part of ``ThreadedWorker`` (runtime/threaded_worker.py) that keeps
the registry of jobs in flight and watches them from a thread of its own:

- **Heartbeats.** A monitor thread does, every ``monitor_interval`` and for every job in flight,
  what the forking parent does for its one horse: it refreshes the worker's key (so the worker is
  not taken for dead), each execution's StartedJobRegistry score and TTL (so rq's maintenance
  does not take a long job for abandoned) and each job's heartbeat.
- **Timeouts.** A thread cannot be interrupted (see runtime/threaded_worker.py), so each job
  enforces its own deadline (an LLM call's read timeout stays below its RQ timeout:
  jobs/timeouts.py). If a job still runs past its RQ timeout, the monitor records it in rq as the
  death penalty would (FailedJobRegistry with ``JobTimeoutException``, out of the
  StartedJobRegistry); its thread runs on to its own deadline and keeps its place in the pool
  meanwhile, and when it ends it changes nothing more in rq.
"""

import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from rq import worker_registration
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.utils import now
from rq.worker import BaseWorker

__all__ = ["JobInFlight", "JobMonitorWorker"]


@dataclass(eq=False)
class JobInFlight:
    job: Job
    queue: Queue
    execution: Execution
    started: float
    timeout: int | None
    """The RQ timeout in seconds, None for none (-1)."""
    recorded_by: str = ""
    """Who writes the job's end in rq: "thread" (it ended) or "timeout" (the monitor)."""


class JobMonitorWorker(BaseWorker):
    """The jobs in flight of a threaded worker, their end in rq, their heartbeats and timeouts."""

    def __init__(self, *args: Any, monitor_interval: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # At most the forking parent's interval (30 s), and often enough for a job's heartbeat.
        self.monitor_interval = min(
            float(self.job_monitoring_interval),
            monitor_interval or settings.LLM_HEARTBEAT_SECONDS,
        )
        self._running: dict[str, JobInFlight] = {}
        self._starting = 0
        self._changed = threading.Condition()
        """Guards ``_running`` and ``_starting``; notified whenever a job starts or ends."""
        self._monitor_stop = threading.Event()

    def _record_in_rq(self, execution: Execution, by: str) -> bool:
        """Whether ``by`` writes this job's end in rq: the first of its thread (the job ended)
        and the monitor (its RQ timeout passed) does, once."""
        with self._changed:
            running = self._running.get(execution.id)
            if running is None:
                return True
            if not running.recorded_by:
                running.recorded_by = by
            return running.recorded_by == by

    def _finalize_success(
        self, job: Job, queue: Queue, execution: Execution, return_value: Any
    ) -> None:
        if self._record_in_rq(execution, "thread"):
            super()._finalize_success(job, queue, execution, return_value)
        else:
            self._ended_after_timeout(job)

    def _finalize_failure(
        self, job: Job, queue: Queue, execution: Execution, exc_info: Any
    ) -> None:
        if self._record_in_rq(execution, "thread"):
            super()._finalize_failure(job, queue, execution, exc_info)
        else:
            self._ended_after_timeout(job)

    def _ended_after_timeout(self, job: Job) -> None:
        self.log.warning(
            "Worker %s: job %s ended after its RQ timeout was recorded; rq keeps it failed",
            self.name,
            job.id,
        )

    def _monitor(self) -> None:
        while not self._monitor_stop.wait(self.monitor_interval):
            try:
                self.maintain_all_heartbeats()
            except Exception:
                self.log.exception("Worker %s: heartbeat failed; next one in a moment", self.name)

    def maintain_all_heartbeats(self) -> None:
        """rq's ``maintain_heartbeats`` for every job in flight at once, after recording in rq
        the jobs whose RQ timeout has passed."""
        with self._changed:
            live = [r for r in self._running.values() if not r.recorded_by]
        for running in live:
            if running.timeout and time.monotonic() - running.started > running.timeout:
                self._time_out(running)
        live = [r for r in live if not r.recorded_by]
        with self.connection.pipeline() as pipeline:
            # Whether the worker is still listed among the live workers: the first command, so
            # that results[0] tells (a job starting meanwhile writes last_heartbeat itself, so the
            # hset below cannot tell a hash that Redis lost).
            pipeline.sismember(
                worker_registration.WORKERS_BY_QUEUE_KEY % self.queue_names()[0], self.key
            )
            self.heartbeat(self.worker_ttl + 60, pipeline=pipeline)
            job_beats = []
            for running in live:
                job = running.job
                working = (now() - job.started_at).total_seconds() if job.started_at else 0.0
                ttl = int(self.get_heartbeat_ttl(job, working_time=working))
                running.execution.heartbeat(job.started_job_registry, ttl, pipeline=pipeline)
                job_beats.append((len(pipeline), job))
                job.heartbeat(now(), ttl, pipeline=pipeline, xx=True)
            results = pipeline.execute()
            # As rq's maintain_heartbeats: a job deleted meanwhile (result_ttl=0) must not be
            # brought back by its heartbeat, and a worker hash that expired (or that Redis lost
            # with its listing) is written again.
            for index, job in job_beats:
                if results[index] == 1:
                    pipeline.delete(job.key)
            if not results[0] or results[1] == 1:
                pipeline.hset(self.key, mapping=self.serialize())
                pipeline.expire(self.key, self.worker_ttl + 60)
                # Gone with it (Redis flushed or restarted): the sets that list the live workers
                # (Worker.all: the ops dashboard, /readyz, the chaos drill) name it again.
                worker_registration.register(self, pipeline)
            pipeline.execute()

    def _time_out(self, running: JobInFlight) -> None:
        """What rq's death penalty leaves for a job past its timeout, minus the kill."""
        if not self._record_in_rq(running.execution, "timeout"):
            return
        job = running.job
        self.log.warning(
            "Worker %s: job %s passed its RQ timeout of %s s; recorded as failed in rq. Its "
            "thread cannot be interrupted and runs on to the job's own deadline.",
            self.name,
            job.id,
            running.timeout,
        )
        job.ended_at = now()
        self.handle_job_failure(
            job,
            queue=running.queue,
            exc_string=(
                f"JobTimeoutException: Task exceeded maximum timeout value ({running.timeout} "
                "seconds). It ran on a thread, which cannot be interrupted: it ends at its own "
                "deadline, and rq keeps this failure."
            ),
            execution=running.execution,
        )
