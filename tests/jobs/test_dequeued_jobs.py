"""Jobs a worker took off the queue and had not claimed when it died: the reconciler enqueues
them again on the worker's own liveness, not on rq's status (which calls them alive until rq's
ten-minute cleanup). On the real stack: real `manage.py rqworker llm` processes killed with -9,
the shared rate limiter holding their jobs before the claim, the fake provider over HTTP,
MariaDB and Redis.

- A thread-pool worker killed while one call is in flight and the other jobs wait on the rate
  limiter: every job runs again on a new worker, each with exactly one successful call, the
  waiting ones on their first attempt; while the worker lived, its waiting jobs were left alone.
- A job taken off the queue by a worker that died before starting it (rq's intermediate list).
- With the default settings, the waiting jobs of a worker killed with -9 call the provider
  within two minutes.
"""

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django_rq
import pytest
from rq.job import Job, JobStatus

from jobs.models import LlmJob
from jobs.reconciler import ReconcileReport, reconcile_jobs
from ledger.models import CostEntry
from llmops.queues import LLM_QUEUE
from tests.conftest import Workers, submit
from tests.jobs.test_reconciler import kill_process_tree
from tests.jobs.test_takeover import Processes, requests_seen, wait_for, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

MODEL = "claude-sonnet-4-6"


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def held_worker(
    processes: Processes, env: dict[str, str], concurrency: int
) -> subprocess.Popen[bytes]:
    """A thread-pool worker whose rate limit lets one call leave and makes every other job wait
    in the worker, before its claim, for minutes (one request a minute, long waits allowed)."""
    environment = {
        **env,
        "LLM_WORKER_CONCURRENCY": str(concurrency),
        "LLM_RATE_LIMIT_ENABLED": "True",
        "LLM_RATE_LIMITS": json.dumps({MODEL: {"rpm": 1}}),
        "LLM_RATE_LIMIT_WINDOW_SECONDS": "60",
        "LLM_RATE_LIMIT_MAX_WAIT_SECONDS": "600",
    }
    return processes.start(environment, "rqworker", LLM_QUEUE)


def free_worker(processes: Processes, env: dict[str, str], *args: str) -> None:
    """The replacement worker: the rate limiter off, so that the jobs run at once."""
    environment = {**env, "LLM_WORKER_CONCURRENCY": "4", "LLM_RATE_LIMIT_ENABLED": "False"}
    processes.start(environment, "rqworker", LLM_QUEUE, *args)


def submit_many(client: Any, count: int) -> list[LlmJob]:
    return [submit(client, messages=[{"role": "user", "content": f"n {i}"}]) for i in range(count)]


def rows(jobs: list[LlmJob]) -> dict[str, tuple[str, str]]:
    """status and rq_job_id of each job, by id."""
    found = LlmJob.objects.filter(id__in=[j.id for j in jobs]).values_list(
        "id", "status", "rq_job_id"
    )
    return {str(job_id): (status, rq_job_id) for job_id, status, rq_job_id in found}


def rq_status(rq_job_id: str) -> str | None:
    queue = django_rq.get_queue(LLM_QUEUE)
    job = Job.fetch(rq_job_id, connection=queue.connection) if rq_job_id else None
    return job.get_status() if job is not None else None


def ledger_of(job: LlmJob) -> list[tuple[int, str, str]]:
    return [
        (e.attempt, e.reason_code, e.outcome) for e in job.cost_entries.order_by("attempt", "id")
    ]


def held_before_the_claim(jobs: list[LlmJob]) -> bool:
    """Every job but one is queued in the database and started in rq (waiting in the worker
    before its claim); the one is running its call."""
    now = rows(jobs)
    statuses = sorted(status for status, _ in now.values())
    if statuses != ["queued"] * (len(jobs) - 1) + ["running"]:
        return False
    return all(
        rq_status(rq_job_id) == JobStatus.STARTED
        for status, rq_job_id in now.values()
        if status == "queued"
    )


def test_jobs_a_killed_worker_held_before_their_claim_run_again_once_each(
    alice_client, fake_provider, workers: Workers, settings, processes
):
    # Six of the worker's 0.5 s beats: a loaded machine does not make a live worker look dead.
    settings.LLM_STALE_AFTER_SECONDS = 3
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0
    # The one call the limiter lets out is still in flight at the kill, 6 s of looks later.
    fake_provider.faults({}, latency_ms="15000")
    jobs = submit_many(alice_client, 4)
    env = worker_env(fake_provider, LLM_HEARTBEAT_SECONDS="0.5")
    worker = held_worker(processes, env, 4)
    wait_for(
        lambda: requests_seen(fake_provider) == 1 and held_before_the_claim(jobs),
        timeout=30,
        what=f"one call in flight and three jobs waiting before their claim\n{processes.logs()}",
    )
    before = rows(jobs)

    # While the worker lives (it beats every 0.5 s), the reconciler leaves its jobs alone for
    # longer than the stale threshold, however long they wait.
    passes: list[ReconcileReport] = []
    look_until = time.monotonic() + 2 * settings.LLM_STALE_AFTER_SECONDS
    while time.monotonic() < look_until:
        passes.append(reconcile_jobs())
        time.sleep(0.25)
    assert not any(report.changed for report in passes), [str(r) for r in passes]
    assert rows(jobs) == before and held_before_the_claim(jobs)
    assert worker.poll() is None, processes.logs()

    kill_process_tree(worker.pid)
    worker.wait(timeout=10)
    fake_provider.reset()
    (claimed,) = [job for job in jobs if before[str(job.id)][0] == "running"]
    waiting = [job for job in jobs if job is not claimed]

    def reconciled() -> bool:
        passes.append(reconcile_jobs())
        now = rows(jobs)
        return now[str(claimed.id)][0] == "retrying" and all(
            now[str(job.id)][0] == "queued" and now[str(job.id)][1] != before[str(job.id)][1]
            for job in waiting
        )

    killed_at = time.monotonic()
    wait_for(
        reconciled,
        timeout=20,
        every=0.5,
        what="the reconciler to enqueue again every job of the dead worker",
    )
    print(f"kill -9 to every job enqueued again: {time.monotonic() - killed_at:.1f} s")
    assert sum(report.requeued_abandoned for report in passes) == len(waiting)
    assert sum(report.recovered_stale for report in passes) == 1
    for job in waiting:  # each is on the queue again, under its new RQ job
        assert rq_status(rows([job])[str(job.id)][1]) == JobStatus.QUEUED

    assert workers.release_scheduled() == 1  # the claimed job's retry
    free_worker(processes, env, "--burst")
    wait_for(
        lambda: {status for status, _ in rows(jobs).values()} == {"completed"},
        timeout=60,
        what=f"every job to complete on the new worker\n{processes.logs()}",
    )
    assert ledger_of(claimed) == [
        (1, "worker_lost", CostEntry.Outcome.UNKNOWN),
        (2, "", CostEntry.Outcome.SUCCESS),
    ]
    for job in waiting:  # never claimed by the dead worker: their first attempt, one call
        assert ledger_of(job) == [(1, "", CostEntry.Outcome.SUCCESS)]
        assert LlmJob.objects.get(id=job.id).attempts == 1
    assert requests_seen(fake_provider) == len(jobs)  # one successful call each, since the reset
    # The killed worker's call ends at the fake provider before the next test.
    wait_for(lambda: fake_provider.stats()["in_flight"] == 0, timeout=25, what="the stale call")


def test_a_job_a_dead_worker_took_off_the_queue_and_never_started_runs_again(
    alice_client, fake_provider, workers: Workers, settings
):
    settings.LLM_STALE_AFTER_SECONDS = 1
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0
    job = submit(alice_client)
    queue = django_rq.get_queue(LLM_QUEUE)
    # What a worker does first, and then dies: rq's BLMOVE onto the intermediate list.
    taken, _ = queue.dequeue_any([queue], None, connection=queue.connection)
    assert taken.id == job.rq_job_id and queue.count == 0
    assert taken.get_status() == JobStatus.QUEUED  # rq calls it alive: "queued"
    assert queue.intermediate_queue.get_job_ids() == [job.rq_job_id]

    # A live worker starts what it took within milliseconds; the first look only notes it.
    first = reconcile_jobs()
    assert rows([job])[str(job.id)] == ("queued", taken.id)
    time.sleep(settings.LLM_STALE_AFTER_SECONDS + 0.2)
    second = reconcile_jobs()
    status, rq_job_id = rows([job])[str(job.id)]
    assert status == "queued" and rq_job_id != taken.id
    assert queue.get_job_ids() == [rq_job_id]
    assert (first.requeued_abandoned, second.requeued_abandoned) == (0, 1)
    assert not reconcile_jobs().changed  # the new RQ job waits on the queue

    workers.work_once()
    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED and job.attempts == 1
    assert ledger_of(job) == [(1, "", CostEntry.Outcome.SUCCESS)]
    assert requests_seen(fake_provider) == 1


@pytest.mark.slow
def test_jobs_held_by_a_killed_worker_call_the_provider_within_two_minutes(
    alice_client, fake_provider, processes
):
    """Default LLM_HEARTBEAT_SECONDS, LLM_STALE_AFTER_SECONDS, LLM_RECONCILE_INTERVAL and
    LLM_LOST_QUEUE_GRACE_SECONDS in every process started here."""
    fake_provider.faults({}, latency_ms="8000")
    jobs = submit_many(alice_client, 3)
    env = {
        name: value
        for name, value in worker_env(fake_provider).items()
        if not name.startswith("LLM_")
    }
    processes.start(env, "reconcile_jobs", "--loop")
    worker = held_worker(processes, env, 3)
    wait_for(
        lambda: requests_seen(fake_provider) == 1 and held_before_the_claim(jobs),
        timeout=60,
        what=f"one call in flight and two jobs waiting before their claim\n{processes.logs()}",
    )
    waiting = [job for job in jobs if rows([job])[str(job.id)][0] == "queued"]
    kill_process_tree(worker.pid)
    killed_at = time.monotonic()
    fake_provider.reset()
    free_worker(processes, env)  # as respawn would: a fresh worker at once
    wait_for(
        lambda: all(status == "completed" for status, _ in rows(waiting).values()),
        timeout=150,
        what=f"the waiting jobs to run and complete\n{processes.logs()}",
        every=0.25,
    )
    seconds = time.monotonic() - killed_at
    print(f"kill -9 to the held jobs completed: {seconds:.1f} s")
    assert seconds < 120, processes.logs()
    for job in waiting:
        assert ledger_of(job) == [(1, "", CostEntry.Outcome.SUCCESS)]
    wait_for(lambda: fake_provider.stats()["in_flight"] == 0, timeout=15, what="the stale call")
