"""An rq worker that runs up to N jobs at once, each on a thread of this one process.

rq's forking ``Worker`` runs one job per process (a fork per job, the parent watching it). An LLM
call spends seconds waiting on the network, so a process per call in flight wastes a Python
interpreter with Django loaded (~120 MB) on each socket. This worker keeps rq's steps for every
job, only on threads, and keeps what the forking worker guarantees:

- **Registries.** The main thread dequeues a job and calls rq's ``prepare_execution`` as the
  forking parent does (StartedJobRegistry entry, the worker's execution index
  ``rq:worker:<name>:executions``, state busy); the job's thread runs rq's ``perform_job`` as a
  horse would (status started, the function, then FinishedJobRegistry or FailedJobRegistry, the
  result, the worker's counters, the execution removed). The execution index lists every job in
  flight: ``Worker.get_current_executions()`` reads it from any process (the ops dashboard).
- **Heartbeats and timeouts.** A monitor thread keeps the worker's key, each execution and each
  job alive as the forking parent does for its horse. A thread cannot be interrupted: rq's death
  penalty is SIGALRM, which only the main thread receives, and raising into a thread
  (``PyThreadState_SetAsyncExc``) would land between any two bytecodes of the job:
  mid-transaction, or after a paid answer and before its ledger row. So each job enforces its
  own deadline, and a job past its RQ timeout is recorded failed in rq by the monitor, as the
  death penalty would (runtime/job_monitor.py).
- **Warm shutdown.** ``SIGTERM`` only sets a flag (a signal handler runs on the main thread
  wherever it is, possibly inside a Redis call or holding a lock). The main loop blocks on the
  queue at most ``DEQUEUE_POLL_SECONDS`` at a time, so it stops dequeuing within that; a job
  dequeued after the signal goes back to the head of its queue. Then it stops the scheduler,
  waits for every job in flight to finish and record, and registers its death. The wait is
  bounded: every job ends by its RQ timeout (an LLM job's call deadline and the recording of its
  result come before it: jobs/timeouts.py), so past the latest end of a job in flight plus
  ``SHUTDOWN_MARGIN_SECONDS`` the worker says which jobs it leaves and exits; the reconciler
  takes them over, as after ``kill -9``. A second ``SIGTERM`` or ``SIGINT`` is rq's cold
  shutdown: exit now, with the same result.
- **Redis.** The main loop blocks on Redis at most ``DEQUEUE_POLL_SECONDS`` at a time, so its
  connection keeps the short ``socket_timeout`` of the settings (``LLM_REDIS_SOCKET_TIMEOUT``)
  rather than the one rq sets for its forking worker's blocking dequeue of minutes.
- **Database connections.** Django's connections are per thread, so no two jobs share one at
  once. A job's thread closes its connections when the job ends: into the process's idle pool,
  for the next thread (``LLM_WORKER_DB_IDLE_SECONDS``); the process holds at most
  ``LLM_WORKER_DB_CONNECTIONS`` in use at once (runtime/db_connections.py).
- **Commands.** rq's stop-job command can only kill a work horse; here it is refused with a
  warning (cancel the job in the application instead). The shutdown command works (it signals
  this process).
"""

import math
import threading
import time
from typing import Any

import redis.exceptions
from django.conf import settings
from django.db import connections
from rq.exceptions import DequeueTimeout, StopRequested
from rq.job import Job
from rq.queue import Queue
from rq.timeouts import BaseDeathPenalty
from rq.worker import DequeueStrategy, WorkerStatus
from rq.worker.base import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT

from runtime import db_connections
from runtime.job_monitor import JobInFlight, JobMonitorWorker

__all__ = ["DEQUEUE_POLL_SECONDS", "SHUTDOWN_MARGIN_SECONDS", "NoDeathPenalty", "ThreadedWorker"]

DEQUEUE_POLL_SECONDS = 1
"""The longest the main loop blocks on an empty queue before it looks at its stop flag again:
a warm shutdown stops dequeuing within this (one BLMOVE a second on an idle worker is nothing)."""
SHUTDOWN_LOG_SECONDS = 30.0
"""While a warm shutdown waits for jobs in flight, it says how many are left this often."""
SHUTDOWN_MARGIN_SECONDS = 5.0
"""A warm shutdown waits this long past the latest end (RQ timeout) of the jobs in flight: a job
still running then is stuck past every deadline of its own, and waiting longer helps nobody."""


class NoDeathPenalty(BaseDeathPenalty):
    """rq's timeout around a job, as a no-op: a thread cannot be interrupted (see above)."""

    def setup_death_penalty(self) -> None:
        pass

    def cancel_death_penalty(self) -> None:
        pass


class ThreadedWorker(JobMonitorWorker):
    """Runs up to ``concurrency`` jobs at once, each on its own thread (see the module)."""

    death_penalty_class = NoDeathPenalty

    def __init__(
        self,
        *args: Any,
        concurrency: int | None = None,
        monitor_interval: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, monitor_interval=monitor_interval, **kwargs)
        self.concurrency = concurrency or settings.LLM_WORKER_CONCURRENCY
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {self.concurrency}")
        self._connection_wait = 1.0

    def _set_connection(self, connection: Any) -> Any:
        """Keep the connection's own socket timeout (rq raises it to ~7 minutes for its forking
        worker's blocking dequeue; this loop blocks a second at a time)."""
        kwargs = connection.connection_pool.connection_kwargs
        timeout = kwargs.get("socket_timeout")
        if timeout is None or timeout <= DEQUEUE_POLL_SECONDS + 1:
            kwargs["socket_timeout"] = max(
                settings.LLM_REDIS_SOCKET_TIMEOUT, DEQUEUE_POLL_SECONDS + 2.0
            )
        return connection

    # --- the main loop --------------------------------------------------------------------------

    def work(  # type: ignore[override]
        self,
        burst: bool = False,
        logging_level: str | None = None,
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
        max_jobs: int | None = None,
        max_idle_time: int | None = None,
        with_scheduler: bool = False,
        dequeue_strategy: DequeueStrategy = DequeueStrategy.DEFAULT,
    ) -> bool:
        """rq's ``work`` with a pool of threads: take a job whenever a thread is free."""
        db_connections.install(settings.LLM_WORKER_DB_CONNECTIONS)
        self.bootstrap(logging_level, date_format, log_format)
        self._dequeue_strategy = dequeue_strategy
        if with_scheduler:
            self._start_scheduler(burst, logging_level, date_format, log_format)
        self._install_signal_handlers()
        monitor = threading.Thread(target=self._monitor, name="rq-monitor", daemon=True)
        monitor.start()
        self.log.info(
            "Worker %s: running up to %d jobs at once on threads", self.name, self.concurrency
        )
        started = 0
        idle_since = time.monotonic()
        try:
            while True:
                try:
                    self.check_for_suspension(burst)
                    if self.should_run_maintenance_tasks:
                        self.run_maintenance_tasks()
                    if self._stop_requested:
                        self.log.info("Worker %s: stopping on request", self.name)
                        break
                    if not self._wait_for_a_free_thread():
                        continue
                    result = self._dequeue(blocking=not burst)
                    if result is None:
                        busy = self._in_flight() > 0
                        if busy:
                            idle_since = time.monotonic()
                        if burst and not busy:
                            self.log.info("Worker %s: done, quitting", self.name)
                            break
                        if burst:
                            self._wait_for_a_change()
                        elif max_idle_time is not None and (
                            time.monotonic() - idle_since >= max_idle_time
                        ):
                            self.log.info(
                                "Worker %s: idle for %d seconds, quitting", self.name, max_idle_time
                            )
                            break
                        continue
                    job, queue = result
                    if self._stop_requested:
                        self._put_back(job, queue)
                        continue
                    self.execute_job(job, queue)
                    started += 1
                    idle_since = time.monotonic()
                    if max_jobs is not None and started >= max_jobs:
                        self.log.info("Worker %s: started %d jobs, quitting", self.name, started)
                        break
                except StopRequested:
                    break
                except SystemExit:
                    raise
                except:  # noqa: E722 - as rq's own loop: log, then shut down warm
                    self.log.error(
                        "Worker %s: found an unhandled exception, quitting...",
                        self.name,
                        exc_info=True,
                    )
                    break
        finally:
            try:
                self._finish_jobs_in_flight()
            finally:
                self._monitor_stop.set()
                self.teardown()
        return bool(started)

    def maintain_all_heartbeats(self) -> None:
        super().maintain_all_heartbeats()
        # The monitor's beat also gives back the database connections no job took again.
        db_connections.prune_idle()

    def _in_flight(self) -> int:
        with self._changed:
            return len(self._running) + self._starting

    def _wait_for_a_free_thread(self) -> bool:
        """True once a thread is free; False after waiting a poll interval for one."""
        with self._changed:
            if len(self._running) + self._starting < self.concurrency:
                return True
            self._changed.wait(timeout=DEQUEUE_POLL_SECONDS)
            return False

    def _wait_for_a_change(self) -> None:
        with self._changed:
            self._changed.wait(timeout=DEQUEUE_POLL_SECONDS)

    def _dequeue(self, *, blocking: bool) -> tuple[Job, Queue] | None:
        """One job, or None after ``DEQUEUE_POLL_SECONDS`` (at once in burst mode)."""
        state = WorkerStatus.BUSY if self._in_flight() else WorkerStatus.IDLE
        if self.get_state() != state:
            self._set_state_quietly(state)
        try:
            result = self.queue_class.dequeue_any(
                self._ordered_queues,
                DEQUEUE_POLL_SECONDS if blocking else None,
                connection=self.connection,
                job_class=self.job_class,
                serializer=self.serializer,
                death_penalty_class=self.death_penalty_class,
            )
        except DequeueTimeout:
            return None
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
            self.log.error(
                "Worker %s: could not connect to Redis instance: %s retrying in %d seconds...",
                self.name,
                error,
                self._connection_wait,
            )
            self._sleep_unless_stopping(self._connection_wait)
            self._connection_wait = min(
                self._connection_wait * self.exponential_backoff_factor,
                self.max_connection_wait_time,
            )
            return None
        self._connection_wait = 1.0
        if result is None:
            return None
        job, queue = result
        self.reorder_queues(reference_queue=queue)
        job.redis_server_version = self.get_redis_server_version()
        self.log.info("Worker %s: %s: %s (%s)", self.name, queue.name, job.description, job.id)
        return result

    def _sleep_unless_stopping(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stop_requested and time.monotonic() < deadline:
            time.sleep(min(0.5, deadline - time.monotonic()))

    def _put_back(self, job: Job, queue: Queue) -> None:
        """A job dequeued after SIGTERM goes back to the head of its queue, never started."""
        with self.connection.pipeline() as pipeline:
            pipeline.lrem(queue.intermediate_queue_key, 1, job.id)
            queue.push_job_id(job.id, pipeline=pipeline, at_front=True)
            pipeline.execute()
        self.log.info("Worker %s: job %s put back on %s (stopping)", self.name, job.id, queue.name)

    # --- one job --------------------------------------------------------------------------------

    def execute_job(self, job: Job, queue: Queue) -> None:
        """Prepare the execution here, as the forking parent does, and run it on a new thread."""
        with self._changed:
            self._starting += 1
        running = None
        try:
            execution = self.prepare_execution(job)
            timeout = job.timeout or self.queue_class.DEFAULT_TIMEOUT
            running = JobInFlight(
                job=job,
                queue=queue,
                execution=execution,
                started=time.monotonic(),
                timeout=None if timeout == -1 else int(timeout),
            )
            with self._changed:
                self._running[execution.id] = running
            threading.Thread(
                target=self._run, args=(running,), name=f"rq-job-{job.id}", daemon=True
            ).start()
        except BaseException:
            if running is not None:
                with self._changed:
                    self._running.pop(running.execution.id, None)
            raise
        finally:
            with self._changed:
                self._starting -= 1
                self._changed.notify_all()

    def _run(self, running: JobInFlight) -> None:
        try:
            self.perform_job(running.job, running.queue, running.execution)
        except BaseException:  # perform_job handles every failure itself; this is a last resort
            self.log.exception("Worker %s: job %s escaped perform_job", self.name, running.job.id)
        finally:
            # Django's connections are per thread: this job's go now, the next job opens its own.
            connections.close_all()
            with self._changed:
                self._running.pop(running.execution.id, None)
                if not self._running and not self._starting and not self._stop_requested:
                    # Under the lock: a job being started meanwhile writes "busy" after this.
                    self._set_state_quietly(WorkerStatus.IDLE)
                self._changed.notify_all()

    def _set_state_quietly(self, state: WorkerStatus) -> None:
        try:
            self.set_state(state)
        except redis.exceptions.RedisError:
            self.log.warning("Worker %s: could not set its state to %s", self.name, state)

    # --- shutdown and commands -------------------------------------------------------------------

    def _shutdown(self) -> None:
        # Called by rq's signal handler on the main thread, wherever the main loop is: only a
        # flag here, the main loop does the rest (see the module).
        self._stop_requested = True

    def _finish_jobs_in_flight(self) -> None:
        if self._stop_requested:
            try:
                self.set_shutdown_requested_date()
            except (redis.exceptions.RedisError, TypeError):
                pass
            if self.scheduler:
                self.stop_scheduler()
        waited_since = time.monotonic()
        logged_at = 0.0
        with self._changed:
            while self._running or self._starting:
                now = time.monotonic()
                give_up_at = self._latest_end() + SHUTDOWN_MARGIN_SECONDS
                if now >= give_up_at:
                    self._leave_to_the_reconciler(now - waited_since)
                    return
                if now - logged_at >= SHUTDOWN_LOG_SECONDS:
                    logged_at = now
                    self.log.info(
                        "Worker %s: waiting for %d job(s) in flight to finish (%.0f s so far, "
                        "at most %.0f s more)",
                        self.name,
                        len(self._running),
                        logged_at - waited_since,
                        give_up_at - now,
                    )
                self._changed.wait(timeout=min(1.0, give_up_at - now))

    def _latest_end(self) -> float:
        """When the last job in flight passes its RQ timeout (monotonic); inf for a job with
        none. Called holding ``_changed``."""
        ends = [r.started + r.timeout if r.timeout else math.inf for r in self._running.values()]
        return max(ends, default=time.monotonic())

    def _leave_to_the_reconciler(self, waited: float) -> None:
        self.log.warning(
            "Worker %s: warm shutdown: %d job(s) still running %.0f s later, past their RQ "
            "timeout: exiting and leaving them to the reconciler (%s)",
            self.name,
            len(self._running),
            waited,
            ", ".join(r.job.id for r in self._running.values()),
        )

    def register_birth(self) -> None:
        super().register_birth()
        # Read by the ops dashboard: how many jobs this worker may run at once.
        self.connection.hset(self.key, "concurrency", self.concurrency)

    def handle_payload(self, message: dict[Any, Any]) -> None:
        from rq.command import parse_payload

        command = parse_payload(message).get("command")
        if command in ("stop-job", "stop-execution"):
            self.log.warning(
                "Worker %s: %s refused: a job running on a thread cannot be stopped",
                self.name,
                command,
            )
            return
        super().handle_payload(message)

    def request_stop_execution(self, execution_id: str) -> None:
        self.log.warning(
            "Worker %s: cannot stop execution %s: it runs on a thread", self.name, execution_id
        )

    def kill_horse(self, sig: Any = None) -> None:
        """No horse: the jobs are threads of this process."""

    def wait_for_horse(self) -> tuple[None, None, None]:
        return None, None, None
