"""Takeovers on the real stack: real `manage.py rqworker` processes, the real reconciler, the
fake provider over HTTP, MariaDB and Redis, and a real network cut (tests/netcut.py).

- A live worker's heartbeat keeps a call longer than the stale threshold its own: one call, one
  ledger row, one attempt, while the reconciler runs.
- A worker cut off from Redis and the database long enough to be taken over still books what
  its paid call really cost (an append-only correction), and completes the job if no newer
  attempt started.
- With the default settings, a job whose worker was killed with -9 calls the provider again
  within two minutes.
"""

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import django_rq
import pytest
from django.db import connection
from django.utils import timezone

from jobs.heartbeat import Heartbeat as _Heartbeat
from jobs.models import LlmJob
from jobs.reconciler import reconcile_jobs
from jobs.services import job_hold
from ledger.models import CostEntry
from llmops.env import database_url
from llmops.queues import LLM_QUEUE, job_lock_key
from tests.conftest import ROOT, FakeProvider, submit
from tests.db_sessions import kill_session, other_sessions
from tests.jobs.test_reconciler import _env_for_subprocess, kill_process_tree
from tests.netcut import NetCut

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


LONG = "Write the report. fake_output_tokens=20000"
"""A prompt the fake provider answers with 20,000 tokens."""

# --- Helpers ------------------------------------------------------------------------------------


def wait_for(condition: Callable[[], Any], *, timeout: float, what: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(every)


class Processes:
    """Starts `manage.py` commands with their output in a log file; stops every one of them."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{len(self.started)}-{args[0]}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "manage.py", *args],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.started.append((process, log))
        return process

    def output(self) -> str:
        """Everything every process has written so far."""
        return "\n".join(log.read_text(errors="replace") for _, log in self.started)

    def logs(self) -> str:
        """The tail of every process's output, for an assertion message."""
        return "\n".join(
            f"--- {log.name} ---\n{log.read_text(errors='replace')[-3000:]}"
            for _, log in self.started
        )

    def stop_all(self) -> None:
        for process, _ in self.started:
            if process.poll() is None:
                kill_process_tree(process.pid)
            process.wait(timeout=10)
            # Whatever is left of its session, even when a test killed the process itself: a
            # child left behind on this Redis index (a scheduler, a work horse) would go on
            # moving or running the next tests' jobs. A CI run saw a scheduled retry taken off
            # the scheduled registry by no process of its own test (not proven to be this).
            subprocess.run(["pkill", "-KILL", "-s", str(process.pid)], check=False)


def queue_state() -> str:
    """What a stuck run's assertion message needs: the jobs that are not final, the llm queue's
    RQ registries, who holds rq's scheduler lock and every Redis client on this index (a process
    of an earlier test left on it would show here)."""
    redis = django_rq.get_connection(LLM_QUEUE)
    queue = django_rq.get_queue(LLM_QUEUE)
    waiting = LlmJob.objects.exclude(status__in=LlmJob.FINAL_STATUSES).values_list(
        "id", "status", "attempts", "error_code", "next_attempt_at", "rq_job_id"
    )
    db = redis.connection_pool.connection_kwargs.get("db", 0)
    clients = [
        f"{client.get('name') or '-'} {client.get('addr')} cmd={client.get('cmd')}"
        for client in redis.client_list()
        if int(client.get("db", -1)) == db
    ]
    return "\n".join(
        [
            "--- not final ---",
            *(" ".join(str(value) for value in row) for row in waiting),
            f"queued: {queue.get_job_ids()}",
            f"scheduled: {queue.scheduled_job_registry.get_job_ids()}",
            f"started: {queue.started_job_registry.get_job_ids()}",
            f"scheduler lock: {redis.get(f'rq:scheduler-lock:{LLM_QUEUE}')!r}",
            "--- redis clients on this index ---",
            *clients,
        ]
    )


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def worker_env(fake_provider: FakeProvider, **extra: str) -> dict[str, str]:
    env = _env_for_subprocess()
    env["ANTHROPIC_BASE_URL"] = fake_provider.url
    env.update(extra)
    return env


def status_of(job: LlmJob) -> str:
    return LlmJob.objects.values_list("status", flat=True).get(id=job.id)


def heartbeat_of(job: LlmJob) -> datetime:
    heartbeat_at = LlmJob.objects.values_list("heartbeat_at", flat=True).get(id=job.id)
    assert heartbeat_at is not None
    return heartbeat_at


def requests_seen(fake_provider: FakeProvider) -> int:
    return int(fake_provider.stats()["requests"])


def nothing_in_flight(fake_provider: FakeProvider) -> bool:
    """Every request the fake provider received has been answered (or dropped)."""
    stats = fake_provider.stats()
    done = sum(stats["by_status"].values()) + stats["dropped"] + stats["timed_out"]
    return bool(stats["requests"]) and done == stats["requests"]


def billed(fake_provider: FakeProvider) -> Decimal:
    return Decimal(fake_provider.stats()["billed"]["cost_usd"])


# --- 1. The heartbeat keeps a long call its own -------------------------------------------------


def test_a_call_longer_than_the_stale_threshold_runs_once_while_the_reconciler_passes(
    alice_client, fake_provider, settings, processes
):
    settings.LLM_STALE_AFTER_SECONDS = 2
    fake_provider.faults({}, latency_ms="6000")
    job = submit(alice_client)
    # Lock ttl = 4 heartbeats = 2 s: without beats from the heartbeat thread the lock would be
    # gone and the heartbeat stale a third of the way through the call.
    worker = processes.start(
        worker_env(fake_provider, LLM_HEARTBEAT_SECONDS="0.5"), "rqworker", LLM_QUEUE, "--burst"
    )
    redis = django_rq.get_connection(LLM_QUEUE)
    recovered: list[int] = []
    heartbeats: set[datetime] = set()
    lock_held: list[bool] = []
    deadline = time.monotonic() + 60
    while worker.poll() is None:
        assert time.monotonic() < deadline, processes.logs()
        recovered.append(reconcile_jobs().recovered_stale)
        # Running before and after the look at the lock: it was running in between.
        before = status_of(job)
        locked = bool(redis.exists(job_lock_key(job.id)))
        if before == status_of(job) == LlmJob.Status.RUNNING:
            lock_held.append(locked)
            heartbeats.add(heartbeat_of(job))
        time.sleep(0.5)
    assert worker.returncode == 0, processes.logs()

    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED and job.attempts == 1, processes.logs()
    assert set(recovered) == {0}
    assert len(lock_held) >= 8  # the reconciler ran all through the call
    # The lock outlived its 2 s ttl: the heartbeat thread extended it (a thread-local token
    # would not let it), and the row's heartbeat moved on well past the stale threshold.
    assert all(lock_held), lock_held
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.outcome == CostEntry.Outcome.SUCCESS and (entry.latency_ms or 0) >= 6000
    assert requests_seen(fake_provider) == 1
    assert max(heartbeats) - min(heartbeats) >= timedelta(seconds=3)


def test_the_heartbeat_extends_a_lock_taken_on_another_thread_and_outlives_an_error(
    alice_client, settings, caplog
):
    settings.LLM_HEARTBEAT_SECONDS = 0.2  # lock ttl: the 2 s floor
    job = submit(alice_client)
    started = timezone.now() - timedelta(minutes=1)
    LlmJob.objects.filter(id=job.id).update(status="running", attempts=1, heartbeat_at=started)
    redis = django_rq.get_connection(LLM_QUEUE)
    key = job_lock_key(job.id)

    # The fault: redis-py keeps a lock's token in a thread-local by default, so a lock taken on
    # the worker's main thread cannot be extended from the heartbeat thread.
    thread_local_lock = redis.lock(key, timeout=2, blocking=False)
    assert thread_local_lock.acquire(blocking=False)
    redis.pexpire(key, 1000)

    def beat_once_elsewhere() -> None:
        _Heartbeat(job.id, thread_local_lock).beat()
        connection.close()

    beat_elsewhere = threading.Thread(target=beat_once_elsewhere)
    beat_elsewhere.start()
    beat_elsewhere.join()
    assert redis.pttl(key) <= 1000  # not extended: this test would catch the fault
    redis.delete(key)
    started = heartbeat_of(job)

    # The lock as job_run takes it (jobs/runner.py), on this (the main) thread.
    lock = redis.lock(key, timeout=2, blocking=False, thread_local=False)
    assert lock.acquire(blocking=False)
    redis.pexpire(key, 500)
    with _Heartbeat(job.id, lock) as heartbeat:
        wait_for(
            lambda: heartbeat_of(job) > started,
            timeout=5,
            what="a first beat",
        )
        assert redis.pttl(key) > 1000  # extended to 2 s from the heartbeat thread

        # Kill the heartbeat thread's database connection: its next row update raises.
        with connection.cursor() as cursor:
            others = other_sessions(cursor, connection.settings_dict["NAME"])
            assert others, "the heartbeat thread holds no database connection"
            for connection_id in others:
                kill_session(cursor, connection_id)
        killed_at = timezone.now()
        wait_for(
            lambda: any("could not reach the database" in r.getMessage() for r in caplog.records),
            timeout=5,
            what="a beat that fails on the database",
        )
        beats_after_error = heartbeat.beats
        # ... and the beats go on: the row is updated again, the lock kept past its ttl.
        wait_for(
            lambda: heartbeat_of(job) > killed_at,
            timeout=5,
            what="a beat after the error",
        )
        time.sleep(2.5)
        assert heartbeat.beats > beats_after_error + 5
        assert redis.pttl(key) > 1000
        assert all(thread.is_alive() for thread in heartbeat.threads)
    assert lock.owned()
    lock.release()


# --- 2. A late result after a takeover ----------------------------------------------------------


def _start_cut_off_worker(
    processes: Processes,
    fake_provider: FakeProvider,
    database: NetCut,
    redis: NetCut,
    heartbeat_seconds: float = 2.0,
) -> subprocess.Popen[bytes]:
    """A burst SimpleWorker (a forking worker's main process would die on the Redis cut) that
    reaches MariaDB and Redis only through the forwarders. Its lock lives four beats (8 s), its
    lease two (4 s): a call that answers within the lease after the cut is not fenced."""
    db = connection.settings_dict
    redis_db = django_rq.get_connection(LLM_QUEUE).connection_pool.connection_kwargs["db"]
    env = worker_env(
        fake_provider,
        DATABASE_URL=database_url(db, host="127.0.0.1", port=database.port),
        REDIS_URL=f"redis://127.0.0.1:{redis.port}/{redis_db}",
        LLM_HEARTBEAT_SECONDS=f"{heartbeat_seconds:g}",
        LLM_RECORD_RETRY_SECONDS="60",
    )
    return processes.start(
        env, "rqworker", LLM_QUEUE, "--burst", "--worker-class", "rq.worker.SimpleWorker"
    )


@pytest.fixture
def netcuts() -> Iterator[tuple[NetCut, NetCut]]:
    db = connection.settings_dict
    pool = django_rq.get_connection(LLM_QUEUE).connection_pool.connection_kwargs
    with (
        NetCut(db["HOST"] or "127.0.0.1", int(db["PORT"] or 3306)) as database,
        NetCut(pool.get("host", "127.0.0.1"), int(pool.get("port", 6379))) as redis,
    ):
        yield database, redis


def _take_over_a_cut_off_worker(
    job: LlmJob, worker: subprocess.Popen[bytes], processes: Processes,
    fake_provider: FakeProvider, netcuts: tuple[NetCut, NetCut], settings: Any,
) -> CostEntry:  # fmt: skip
    """Cut the worker off mid-call, let its lock expire, and take the job over as the reconciler
    does. Returns the estimated ledger row of the taken-over attempt."""
    wait_for(
        lambda: status_of(job) == LlmJob.Status.RUNNING and requests_seen(fake_provider) == 1,
        timeout=30,
        what=f"the worker to start the call\n{processes.logs()}",
    )
    time.sleep(1)  # into the call
    for cut in netcuts:
        cut.cut()
    redis = django_rq.get_connection(LLM_QUEUE)
    wait_for(
        lambda: not redis.exists(job_lock_key(job.id)),
        timeout=15,
        what="the cut-off worker's lock to expire",
    )
    settings.LLM_STALE_AFTER_SECONDS = 1
    assert worker.poll() is None, processes.logs()
    report = reconcile_jobs()
    assert report.recovered_stale == 1, (str(report), processes.logs())
    job.refresh_from_db()
    assert job.status == LlmJob.Status.RETRYING and job.attempts == 1
    (estimate,) = CostEntry.objects.filter(job=job)
    assert estimate.outcome == CostEntry.Outcome.UNKNOWN and estimate.is_estimated
    assert estimate.cost_usd > 0
    return estimate


def _let_the_late_result_in(
    worker: subprocess.Popen[bytes], processes: Processes,
    fake_provider: FakeProvider, netcuts: tuple[NetCut, NetCut],
) -> None:  # fmt: skip
    """The paid call returned while the worker was still cut off, within its lease (it keeps
    trying to record the result); the network comes back; the worker records it and exits."""
    wait_for(
        lambda: nothing_in_flight(fake_provider),
        timeout=20,
        what="the cut-off worker's call to return",
    )
    time.sleep(1.5)
    assert worker.poll() is None, processes.logs()
    for cut in netcuts:
        cut.restore()
    assert worker.wait(timeout=60) == 0, processes.logs()
    # The result came back while the database was cut off, and the worker rode that out.
    assert "recording an attempt failed on the database" in processes.output()


def test_a_late_result_after_a_takeover_is_booked_as_a_correction_and_completes_the_job(
    alice_client, fake_provider, workers, settings, processes, netcuts
):
    fake_provider.faults({}, latency_ms="3000")  # answered 2 s after the cut: within the lease
    job = submit(alice_client)
    worker = _start_cut_off_worker(processes, fake_provider, *netcuts)
    estimate = _take_over_a_cut_off_worker(job, worker, processes, fake_provider, netcuts, settings)
    _let_the_late_result_in(worker, processes, fake_provider, netcuts)

    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED, processes.logs()
    assert job.attempts == 1 and job.output_text
    entries = list(CostEntry.objects.filter(job=job).order_by("created_at"))
    assert len(entries) == 2
    correction = entries[1]
    assert correction.entry_type == CostEntry.EntryType.CORRECTION
    assert correction.corrects_id == estimate.id and correction.attempt == 1
    assert correction.outcome == CostEntry.Outcome.SUCCESS
    # The ledger holds exactly what the provider billed.
    assert sum(e.cost_usd for e in entries) == job.cost_usd == billed(fake_provider)
    assert job.cost_usd > 0

    # The retry the takeover scheduled was dropped: running it makes no second call.
    assert workers.release_scheduled() == 1
    workers.work_once()
    assert requests_seen(fake_provider) == 1
    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED and job.attempts == 1
    assert CostEntry.objects.filter(job=job).count() == 2


def test_a_late_result_after_a_newer_attempt_started_only_corrects_the_ledger(
    alice_client, fake_provider, workers, settings, processes, netcuts
):
    fake_provider.faults({}, latency_ms="3000")  # answered 2 s after the cut: within the lease
    job = submit(alice_client)
    worker = _start_cut_off_worker(processes, fake_provider, *netcuts)
    estimate = _take_over_a_cut_off_worker(job, worker, processes, fake_provider, netcuts, settings)
    # The retry runs (on this process's own connections) while the cut-off call is pending.
    fake_provider.faults({}, latency_ms="0")
    assert workers.release_scheduled() == 1
    workers.work_once()
    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED and job.attempts == 2
    retry_output, retry_cost = job.output_text, job.cost_usd
    assert requests_seen(fake_provider) == 2

    _let_the_late_result_in(worker, processes, fake_provider, netcuts)

    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED and job.attempts == 2
    assert job.output_text == retry_output
    entries = list(CostEntry.objects.filter(job=job).order_by("created_at"))
    assert [(e.attempt, e.entry_type, e.outcome) for e in entries] == [
        (1, CostEntry.EntryType.ATTEMPT, CostEntry.Outcome.UNKNOWN),
        (2, CostEntry.EntryType.ATTEMPT, CostEntry.Outcome.SUCCESS),
        (1, CostEntry.EntryType.CORRECTION, CostEntry.Outcome.SUCCESS),
    ], processes.logs()
    assert entries[2].corrects_id == estimate.id
    # Two calls billed, two calls in the ledger.
    assert sum(e.cost_usd for e in entries) == job.cost_usd == billed(fake_provider)
    assert job.cost_usd < retry_cost  # the estimate was the upper bound; the real cost is less
    assert requests_seen(fake_provider) == 2


def test_a_worker_cut_off_from_both_paths_fences_its_call_before_anyone_may_take_it_over(
    alice_client, fake_provider, workers, settings, processes, netcuts
):
    """Both paths frozen (bytes stop, connections stay open), the provider reachable: the worker
    cannot renew its claim anywhere, so it stops its call within its lease, while its lock still
    stands, before the reconciler may take the job over; the takeover's retry then runs alone,
    and the fenced attempt, recorded when the paths heal, is never booked twice."""
    # A 40 s stream (20,000 tokens at 500 a second): far longer than the lease.
    fake_provider.faults({}, stream_tokens_per_second=500)
    job = submit(alice_client, max_tokens=20_000, messages=[{"role": "user", "content": LONG}])
    worker = _start_cut_off_worker(processes, fake_provider, *netcuts)
    wait_for(
        lambda: status_of(job) == LlmJob.Status.RUNNING and requests_seen(fake_provider) == 1,
        timeout=30,
        what=f"the worker to start the call\n{processes.logs()}",
    )
    time.sleep(1)
    for path in netcuts:
        path.freeze()
    frozen_at = time.monotonic()
    redis = django_rq.get_connection(LLM_QUEUE)
    wait_for(
        lambda: nothing_in_flight(fake_provider),
        timeout=10,
        what=f"the fenced call to end at the provider\n{processes.logs()}",
        every=0.05,
    )
    fenced_after = time.monotonic() - frozen_at
    # Fenced within its lease (4 s) and a look, while the lock (8 s) still stood: no takeover
    # could have come yet.
    assert redis.exists(job_lock_key(job.id)), fenced_after
    assert fenced_after < 4 + 2, fenced_after
    assert worker.poll() is None, processes.logs()

    wait_for(
        lambda: not redis.exists(job_lock_key(job.id)),
        timeout=15,
        what="the cut-off worker's lock to expire",
    )
    settings.LLM_STALE_AFTER_SECONDS = 1
    assert reconcile_jobs().recovered_stale == 1, processes.logs()
    fake_provider.faults({}, stream_tokens_per_second=100_000)
    assert workers.release_scheduled() == 1
    workers.work_once()
    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED and job.attempts == 2, list(
        CostEntry.objects.filter(job=job).values_list("error_message", flat=True)
    )
    assert requests_seen(fake_provider) == 2

    for path in netcuts:
        path.thaw()
    assert worker.wait(timeout=60) == 0, processes.logs()
    assert "self-fencing" in processes.output()
    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED and job.attempts == 2
    entries = list(CostEntry.objects.filter(job=job).order_by("created_at"))
    # Attempt 1 once (at its upper bound: the fenced call's outcome is unknown), attempt 2 once.
    assert [(e.attempt, e.entry_type) for e in entries] == [
        (1, CostEntry.EntryType.ATTEMPT),
        (2, CostEntry.EntryType.ATTEMPT),
    ], processes.logs()
    assert sum(e.cost_usd for e in entries) == job.cost_usd >= billed(fake_provider) > 0
    assert requests_seen(fake_provider) == 2


# --- 3. kill -9, default settings ---------------------------------------------------------------


@pytest.mark.slow
def test_a_job_whose_worker_is_killed_calls_the_provider_again_within_two_minutes(
    alice_client, fake_provider, processes
):
    """Default LLM_HEARTBEAT_SECONDS, LLM_STALE_AFTER_SECONDS, LLM_RECONCILE_INTERVAL,
    LLM_OVERDUE_RETRY_SECONDS and LLM_RETRY_DELAY_SCALE in every process started here."""
    # Long enough that the first call is still pending at the kill, short enough that the fake
    # provider has finished with it before this test ends.
    fake_provider.faults({}, latency_ms="40000")
    job = submit(alice_client)
    env = {
        name: value
        for name, value in worker_env(fake_provider).items()
        if not name.startswith("LLM_")
    }
    processes.start(env, "reconcile_jobs", "--loop")
    worker = processes.start(env, "rqworker", LLM_QUEUE, "--with-scheduler")
    wait_for(
        lambda: status_of(job) == LlmJob.Status.RUNNING and requests_seen(fake_provider) == 1,
        timeout=60,
        what=f"the worker to start the call\n{processes.logs()}",
    )
    kill_process_tree(worker.pid)
    killed_at = time.monotonic()
    fake_provider.faults({}, latency_ms="0")
    # As respawn would: a fresh worker at once. It cannot take rq's scheduler lock while the
    # dead scheduler's lock lives, so the retry moves through the reconciler's overdue pass.
    processes.start(env, "rqworker", LLM_QUEUE, "--with-scheduler")
    wait_for(
        lambda: requests_seen(fake_provider) >= 2,
        timeout=150,
        what=f"the second provider call\n{processes.logs()}",
        every=0.25,
    )
    seconds = time.monotonic() - killed_at
    print(f"kill -9 to the second provider call: {seconds:.1f} s")
    assert seconds < 120, processes.logs()
    wait_for(
        lambda: status_of(job) == LlmJob.Status.COMPLETED,
        timeout=30,
        what=f"the job to complete\n{processes.logs()}",
    )
    job.refresh_from_db()
    assert job.attempts == 2
    assert [
        (e.attempt, e.reason_code, e.outcome) for e in job.cost_entries.order_by("attempt")
    ] == [
        (1, "worker_lost", CostEntry.Outcome.UNKNOWN),
        (2, "", CostEntry.Outcome.SUCCESS),
    ]


@pytest.mark.parametrize(("overdue_by", "requeued"), [(10, 0), (20, 1)])
def test_a_retry_is_overdue_after_the_overdue_threshold_not_after_the_lost_queue_grace(
    alice_client, settings, overdue_by, requeued
):
    """The two-minute bound above counts LLM_OVERDUE_RETRY_SECONDS (15 s), not the longer
    LLM_LOST_QUEUE_GRACE_SECONDS (30 s) that applies to RQ jobs Redis lost."""
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 30
    settings.LLM_OVERDUE_RETRY_SECONDS = 15
    job = submit(alice_client)
    # A retry whose RQ job still exists but that no scheduler moved: it waits in the scheduled
    # registry (a held job's RQ job is scheduled the same way).
    assert job_hold(job_id=job.id, rq_job_id=job.rq_job_id, delay_seconds=600, reason="test")
    LlmJob.objects.filter(id=job.id).update(
        status="retrying",
        attempts=1,
        next_attempt_at=timezone.now() - timedelta(seconds=overdue_by),
    )
    assert reconcile_jobs().requeued_overdue == requeued
