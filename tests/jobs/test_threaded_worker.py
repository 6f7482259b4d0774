"""The llm worker runs many calls at once on threads of one process (runtime/threaded_worker.py),
and keeps every guarantee of rq's forking worker. On the real stack: real `manage.py rqworker`
processes, the fake provider over HTTP, MariaDB and Redis.

- Several calls in flight, each longer than the stale threshold: the per-job locks and
  heartbeats hold them while the reconciler runs, each attempt leaves one ledger row, rq's
  started registry lists them (its entries kept alive) and then the finished one, the worker's
  own heartbeat goes on, the ops dashboard lists every job it runs, and no database connection
  is left open.
- Database connections: one per job thread, never shared, closed at the job's end, and at most
  LLM_WORKER_DB_CONNECTIONS open in the process at once.
- SIGTERM: every call in flight finishes and records, no new job starts, the process exits.
- kill -9 with calls in flight: the reconciler recovers every job and none is lost.
- rq's registries end as the forking worker leaves them, a job past its RQ timeout included.
- Which worker each Procfile line gets, and the setting's validation.
"""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import django_rq
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django_rq.workers import get_worker
from rq import Worker
from rq.job import JobStatus

from agents.fork_server import fork_server
from jobs.models import LlmJob
from jobs.reconciler import reconcile_jobs
from ledger.models import CostEntry
from llmops.queues import AGENTS_QUEUE, LLM_QUEUE, job_lock_key
from runtime.threaded_worker import NoDeathPenalty
from runtime.workers import LlmWorker, PreloadingWorker, ThreadedLlmWorker
from tests.conftest import ROOT, FakeProvider, submit
from tests.db_sessions import kill_session, other_sessions
from tests.jobs.test_reconciler import kill_process_tree
from tests.jobs.test_takeover import Processes, billed, requests_seen, wait_for, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

DATA = "/admin/ops/dashboard/data.json"


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def threaded_worker(
    processes: Processes, fake_provider: FakeProvider, concurrency: int, *args: str, **env: str
) -> subprocess.Popen[bytes]:
    """`manage.py rqworker llm <args>`, as the Procfile runs it, with beats every 0.5 s. The
    shared rate limiter is off: these tests count calls in flight, not when they may start."""
    environment = worker_env(
        fake_provider,
        LLM_WORKER_CONCURRENCY=str(concurrency),
        LLM_HEARTBEAT_SECONDS="0.5",
        LLM_RATE_LIMIT_ENABLED="False",
        **env,
    )
    return processes.start(environment, "rqworker", LLM_QUEUE, *args)


def in_flight_baseline(fake_provider: FakeProvider) -> int:
    """Calls still held by the fake provider from earlier tests (their clients are gone)."""
    return int(fake_provider.stats()["in_flight"])


def the_worker() -> Any:
    workers = Worker.all(queue=django_rq.get_queue(LLM_QUEUE))
    return workers[0] if len(workers) == 1 else None


def other_database_connections(before: frozenset[int] = frozenset()) -> list[int]:
    """Server connections to the test database other than this test's own: the worker's.
    ``before``: those open before the worker started (a process of an earlier test on this
    test database still closing), left out."""
    with connection.cursor() as cursor:
        others = other_sessions(cursor, connection.settings_dict["NAME"])
        return [session for session in others if session not in before]


def statuses(jobs: list[LlmJob]) -> list[str]:
    by_id = dict(LlmJob.objects.filter(id__in=[j.id for j in jobs]).values_list("id", "status"))
    return [by_id[j.id] for j in jobs]


def submit_many(client: Any, count: int) -> list[LlmJob]:
    return [submit(client, messages=[{"role": "user", "content": f"n {i}"}]) for i in range(count)]


def staff_client() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("sam", is_staff=True))
    return client


# --- Many calls in flight in one process ---------------------------------------------------------


def test_calls_in_flight_keep_their_locks_registries_heartbeats_and_one_ledger_row_each(
    alice_client, fake_provider, settings, processes
):
    settings.LLM_STALE_AFTER_SECONDS = 1  # every call below lasts four times longer
    baseline = in_flight_baseline(fake_provider)
    fake_provider.faults({}, latency_ms="4000")
    jobs = [
        submit(alice_client, messages=[{"role": "user", "content": f"n {i}"}]) for i in range(8)
    ]
    before = frozenset(other_database_connections())
    threaded_worker(
        processes,
        fake_provider,
        8,
        "--with-scheduler",
        LLM_WORKER_DB_CONNECTIONS="3",
        LLM_WORKER_DB_IDLE_SECONDS="1",
    )
    wait_for(
        lambda: requests_seen(fake_provider) == 8 and set(statuses(jobs)) == {"running"},
        timeout=30,
        what=f"eight calls in flight\n{processes.logs()}",
    )
    queue = django_rq.get_queue(LLM_QUEUE)
    redis = queue.connection
    rq_ids = {LlmJob.objects.get(id=job.id).rq_job_id for job in jobs}
    worker = the_worker()
    assert worker is not None
    first_scores = dict(redis.zrange(queue.started_job_registry.key, 0, -1, withscores=True))
    first_heartbeat = worker.last_heartbeat
    dashboard = staff_client().get(DATA).json()

    recovered, started_counts, locked, connections_open, executions = [], [], [], [], []
    scores = first_scores
    while set(statuses(jobs)) == {"running"}:
        look_scores = dict(redis.zrange(queue.started_job_registry.key, 0, -1, withscores=True))
        # A recovery is wrong whenever it happens: counted at every look.
        recovered.append(reconcile_jobs().recovered_stale)
        look = (
            queue.started_job_registry.get_job_count(cleanup=False),
            all(redis.exists(job_lock_key(job.id)) for job in jobs),
            len(other_database_connections(before)),
            {e.job_id for e in worker.get_current_executions(refresh=True)},
        )
        # The rest only if every job still runs after the look: one that completed between the
        # loop's check and the look has rightly left the registry, its lock and its execution.
        if set(statuses(jobs)) != {"running"}:
            break
        scores = look_scores
        started_counts.append(look[0])
        locked.append(look[1])
        connections_open.append(look[2])
        executions.append(look[3])
        time.sleep(0.3)
    wait_for(
        lambda: set(statuses(jobs)) == {"completed"},
        timeout=30,
        what=f"the calls to complete\n{processes.logs()}",
    )

    # The per-job locks and heartbeats kept every call its own: nothing was taken over.
    assert set(recovered) == {0} and len(recovered) >= 5
    assert all(locked), locked
    # rq saw eight jobs started at once, in its registry and in the worker's execution index.
    assert set(started_counts) == {8}, started_counts
    assert all(ids == rq_ids for ids in executions), (executions, rq_ids)
    # The monitor extended each started-registry entry, and the worker's own heartbeat.
    assert len(scores) == 8 and all(scores[key] > first_scores[key] + 1 for key in scores)
    worker.refresh()
    assert worker.last_heartbeat > first_heartbeat
    # The ops dashboard listed every job the worker was running.
    (row,) = [w for w in dashboard["workers"]["workers"] if w["queues"] == [LLM_QUEUE]]
    assert row["concurrency"] == 8
    assert {j["llm_job"]["id"] for j in row["running"]} == {str(job.id) for job in jobs}
    # While eight calls waited on the provider, at most three threads held connections (each
    # with, for a moment, a second one to make a missing metrics counter row: metrics/counters.py).
    assert max(connections_open) <= 2 * 3, connections_open

    # One attempt, one ledger row per job; the ledger holds what the provider billed.
    assert requests_seen(fake_provider) == 8
    # Calls of earlier tests the provider still held count in its peak only while they lasted:
    # those still held now were held all along (one that ended before ours began was counted
    # in the baseline and not in the peak: a CI run's 8 >= 1 + 8).
    stats = fake_provider.stats()
    assert stats["peak_in_flight"] >= min(baseline, stats["in_flight"]) + 8
    entries = CostEntry.objects.filter(job__in=jobs)
    assert sorted(str(e.job_id) for e in entries) == sorted(str(j.id) for j in jobs)
    assert {e.outcome for e in entries} == {CostEntry.Outcome.SUCCESS}
    assert set(LlmJob.objects.filter(id__in=[j.id for j in jobs]).values_list("attempts")) == {(1,)}
    assert sum(e.cost_usd for e in entries) == billed(fake_provider) > Decimal(0)
    # rq's registries as a forking worker leaves them; the worker lives on, idle.
    wait_for(
        lambda: queue.finished_job_registry.get_job_count(cleanup=False) == 8,
        timeout=10,
        what="rq to finish the jobs",
    )
    assert queue.started_job_registry.get_job_count(cleanup=False) == 0
    assert queue.failed_job_registry.get_job_count(cleanup=False) == 0
    worker = the_worker()
    assert worker is not None and worker.successful_job_count == 8
    assert worker.get_current_executions(refresh=True) == []
    # Each job's thread gave its connections back when its job ended; idle past
    # LLM_WORKER_DB_IDLE_SECONDS, the worker closed them (its monitor beats every 0.5 s).
    wait_for(
        lambda: other_database_connections(before) == [],
        timeout=5,
        what="the worker's connections to close",
    )


def test_job_threads_take_turns_on_at_most_their_slots_of_connections_and_reuse_them(
    fake_provider, processes
):
    queue = django_rq.get_queue(LLM_QUEUE)
    probes = [
        queue.enqueue("tests.jobs.worker_probes.hold_a_database_connection", 1.0) for _ in range(6)
    ]
    before = frozenset(other_database_connections())
    threaded_worker(
        processes,
        fake_provider,
        6,
        LLM_WORKER_DB_CONNECTIONS="2",
        LLM_WORKER_DB_IDLE_SECONDS="1",
    )
    seen: list[int] = []
    started: list[int] = []
    while not all(probe.get_status(refresh=True) == JobStatus.FINISHED for probe in probes):
        seen.append(len(other_database_connections(before)))
        started.append(queue.started_job_registry.get_job_count(cleanup=False))
        assert len(seen) < 200, processes.logs()
        time.sleep(0.1)

    results = [probe.return_value(refresh=True) for probe in probes]
    # Six jobs at once, each on its own thread...
    assert max(started) == 6, started
    assert len({r["thread"] for r in results}) == 6
    # ... never more than two connections open: the other threads waited for a slot, then took
    # the connection a finished job gave back (its session already set up).
    assert max(seen) <= 2 and max(r["slots_in_use"] for r in results) <= 2, (seen, results)
    assert len({r["connection_id"] for r in results}) <= 2, results
    # Idle past LLM_WORKER_DB_IDLE_SECONDS, they closed.
    wait_for(
        lambda: other_database_connections(before) == [],
        timeout=5,
        what="the worker's idle connections to close",
    )


def test_a_pooled_connection_the_server_killed_is_never_handed_to_a_job(fake_provider, processes):
    """A job takes the connection the previous job gave back; one whose session the server
    ended meanwhile (KILL, a restart) is dropped, and the job gets a new one, not an error."""
    queue = django_rq.get_queue(LLM_QUEUE)
    threaded_worker(processes, fake_provider, 2, LLM_WORKER_DB_CONNECTIONS="1")

    def probe() -> dict[str, Any]:
        job = queue.enqueue("tests.jobs.worker_probes.hold_a_database_connection", 0.0)
        wait_for(
            lambda: job.get_status(refresh=True) in (JobStatus.FINISHED, JobStatus.FAILED),
            timeout=30,
            what=f"the probe\n{processes.logs()}",
        )
        assert job.get_status() == JobStatus.FINISHED, job.latest_result().exc_string
        return job.return_value(refresh=True)  # type: ignore[no-any-return]

    first, second = probe(), probe()
    assert second["connection_id"] == first["connection_id"]  # reused
    with connection.cursor() as cursor:
        kill_session(cursor, second["connection_id"])
    wait_for(
        lambda: second["connection_id"] not in other_database_connections(),
        timeout=5,
        what="the server to end the session",
    )
    third = probe()
    assert third["connection_id"] != second["connection_id"]
    assert probe()["connection_id"] == third["connection_id"]


# --- Shutdown and crash --------------------------------------------------------------------------


def test_sigterm_lets_every_call_in_flight_finish_and_record_and_starts_no_new_job(
    alice_client, fake_provider, processes
):
    fake_provider.faults({}, latency_ms="3000")
    jobs = [
        submit(alice_client, messages=[{"role": "user", "content": f"n {i}"}]) for i in range(7)
    ]
    worker = threaded_worker(processes, fake_provider, 4, "--with-scheduler")
    wait_for(
        lambda: requests_seen(fake_provider) == 4,
        timeout=30,
        what=f"four calls in flight\n{processes.logs()}",
    )
    time.sleep(0.5)
    assert requests_seen(fake_provider) == 4  # four threads: the fifth job waits its turn
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, processes.logs()

    # Every call in flight finished and was recorded; no new job started after the signal.
    assert requests_seen(fake_provider) == 4
    assert sorted(statuses(jobs)) == ["completed"] * 4 + ["queued"] * 3
    completed = [j for j in jobs if statuses([j]) == ["completed"]]
    assert CostEntry.objects.filter(job__in=completed).count() == 4
    assert not CostEntry.objects.exclude(job__in=completed).exists()
    queue = django_rq.get_queue(LLM_QUEUE)
    assert queue.count == 3  # the waiting jobs are still on the queue, for the next worker
    assert queue.finished_job_registry.get_job_count(cleanup=False) == 4
    assert queue.started_job_registry.get_job_count(cleanup=False) == 0
    assert the_worker() is None  # it registered its death
    assert "warm shut down requested" in processes.output()


def test_kill_9_with_calls_in_flight_loses_no_job(
    alice_client, fake_provider, workers, settings, processes
):
    fake_provider.faults({}, latency_ms="8000")
    jobs = [
        submit(alice_client, messages=[{"role": "user", "content": f"n {i}"}]) for i in range(4)
    ]
    worker = threaded_worker(processes, fake_provider, 4)
    wait_for(
        lambda: requests_seen(fake_provider) == 4 and set(statuses(jobs)) == {"running"},
        timeout=30,
        what=f"four calls in flight\n{processes.logs()}",
    )
    kill_process_tree(worker.pid)
    worker.wait(timeout=10)
    fake_provider.reset()
    redis = django_rq.get_connection(LLM_QUEUE)
    wait_for(
        lambda: not any(redis.exists(job_lock_key(job.id)) for job in jobs),
        timeout=10,
        what="the killed worker's locks to expire",
    )
    settings.LLM_STALE_AFTER_SECONDS = 1
    assert reconcile_jobs().recovered_stale == 4
    assert set(statuses(jobs)) == {"retrying"}
    assert workers.release_scheduled() == 4
    again = threaded_worker(processes, fake_provider, 4, "--burst")
    assert again.wait(timeout=60) == 0, processes.logs()

    assert set(statuses(jobs)) == {"completed"}
    for job in jobs:
        assert [
            (e.attempt, e.reason_code, e.outcome) for e in job.cost_entries.order_by("attempt")
        ] == [
            (1, "worker_lost", CostEntry.Outcome.UNKNOWN),
            (2, "", CostEntry.Outcome.SUCCESS),
        ]
    assert requests_seen(fake_provider) == 4  # the second attempts only, since the reset
    # The stale calls of the killed worker end at the fake provider before the next test.
    wait_for(lambda: fake_provider.stats()["in_flight"] == 0, timeout=15, what="stale calls")


# --- rq's registries, as the forking worker leaves them -----------------------------------------


@pytest.mark.parametrize("concurrency", [1, 4], ids=["forking", "threaded"])
def test_rq_registries_end_as_with_the_forking_worker_a_timed_out_job_included(
    fake_provider, processes, concurrency
):
    queue = django_rq.get_queue(LLM_QUEUE)
    ok = queue.enqueue("operator.add", 2, 3)
    broken = queue.enqueue("builtins.int", "not a number")
    too_long = queue.enqueue("time.sleep", 3, job_timeout=1)
    worker = threaded_worker(processes, fake_provider, concurrency, "--burst")
    if concurrency > 1:
        # The thread cannot be killed: rq records the timeout while the thread still runs.
        wait_for(
            lambda: too_long.get_status(refresh=True) == JobStatus.FAILED,
            timeout=30,
            what=f"the timeout to be recorded\n{processes.logs()}",
        )
        assert worker.poll() is None  # the sleeping thread holds the burst worker open
        assert too_long.id not in queue.started_job_registry.get_job_ids(cleanup=False)
    assert worker.wait(timeout=60) == 0, processes.logs()

    assert ok.get_status(refresh=True) == JobStatus.FINISHED and ok.return_value() == 5
    assert broken.get_status(refresh=True) == JobStatus.FAILED
    assert "ValueError" in (broken.latest_result().exc_string or "")
    assert too_long.get_status(refresh=True) == JobStatus.FAILED
    assert "Task exceeded maximum timeout value (1 seconds)" in (
        too_long.latest_result().exc_string or ""
    )
    assert queue.finished_job_registry.get_job_ids(cleanup=False) == [ok.id]
    assert sorted(queue.failed_job_registry.get_job_ids(cleanup=False)) == sorted(
        [broken.id, too_long.id]
    )
    assert queue.started_job_registry.get_job_count(cleanup=False) == 0
    assert queue.count == 0
    # The worker's counters: one success, two failures (the late end of the thread not counted).
    stats = queue.connection.hgetall(Worker.redis_worker_namespace_prefix + _worker_name(processes))
    assert (int(stats[b"successful_job_count"]), int(stats[b"failed_job_count"])) == (1, 2)


def _worker_name(processes: Processes) -> str:
    """The name the worker logged at start (its key expires 60 s after its death)."""
    for line in processes.output().splitlines():
        if "started with PID" in line:
            return line.split("Worker ", 1)[1].split(":", 1)[0]
    raise AssertionError(processes.logs())


# --- Which worker, and the setting ---------------------------------------------------------------


def test_the_llm_and_agents_workers_run_on_threads_and_every_other_worker_forks(settings):
    settings.LLM_WORKER_CONCURRENCY = 32
    settings.LLM_AGENT_WORKER_CONCURRENCY = 12
    llm = get_worker(LLM_QUEUE)
    assert type(llm) is ThreadedLlmWorker and isinstance(llm, PreloadingWorker)
    assert llm.concurrency == 32 and llm.death_penalty_class is NoDeathPenalty
    # The Procfile's worker_agents: agent runs' tool tasks, on threads of their own.
    agents = get_worker(AGENTS_QUEUE)
    assert type(agents) is ThreadedLlmWorker and agents.concurrency == 12
    # Its tool calls' fork server starts with its work (agents/fork_server.py), not here: a
    # worker made and not run leaves no process behind.
    assert agents.tool_fork_server and not llm.tool_fork_server
    assert fork_server() is None
    # On the agents queue and another: rq's forking worker, as for the default one.
    assert type(get_worker(AGENTS_QUEUE, "default")) is LlmWorker
    # The Procfile's worker_default: rq's forking worker with rq's own timeouts.
    default = get_worker("default", "alerts")
    assert type(default) is LlmWorker and isinstance(default, Worker)
    assert default.death_penalty_class is not NoDeathPenalty
    settings.LLM_WORKER_CONCURRENCY = 1  # today's behaviour for the llm queue too
    assert type(get_worker(LLM_QUEUE)) is LlmWorker
    settings.LLM_AGENT_WORKER_CONCURRENCY = 1
    assert type(get_worker(AGENTS_QUEUE)) is LlmWorker


def test_a_worker_whose_registration_redis_lost_names_itself_again_at_its_heartbeat(settings):
    """Found by the chaos drill (issue 18): after a FLUSHDB the monitor wrote the worker's hash
    back but not the sets that list live workers, so ``Worker.all`` (the ops dashboard,
    ``/readyz``, the drill) found no llm worker however long it ran."""
    settings.LLM_WORKER_CONCURRENCY = 4
    worker = get_worker(LLM_QUEUE)
    worker.register_birth()
    connection = worker.connection
    assert [w.name for w in Worker.all(connection=connection)] == [worker.name]

    connection.flushdb()
    assert Worker.all(connection=connection) == []
    # A job starting meanwhile writes the worker's last_heartbeat itself (rq's
    # prepare_job_execution), as on a busy worker, before the monitor's beat.
    worker.heartbeat()
    worker.maintain_all_heartbeats()

    assert [w.name for w in Worker.all(connection=connection)] == [worker.name]
    queue = django_rq.get_queue(LLM_QUEUE)
    assert [w.name for w in Worker.all(queue=queue)] == [worker.name]
    worker.register_death()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LLM_WORKER_CONCURRENCY", "0", "LLM_WORKER_CONCURRENCY must be at least 1, not 0"),
        ("LLM_WORKER_DB_CONNECTIONS", "many", "LLM_WORKER_DB_CONNECTIONS must be an integer"),
    ],
)
def test_a_bad_worker_setting_stops_start_up(variable, value, message):
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT, env={**os.environ, variable: value}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and message in result.stderr, result.stderr
