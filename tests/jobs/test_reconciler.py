"""No job is ever lost: Redis flushes and killed workers are repaired from the database."""

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from jobs.models import LlmJob
from jobs.reconciler import reconcile_jobs
from jobs.services import job_hold
from ledger.models import CostEntry
from llmops.env import database_url
from tests.conftest import ROOT, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_a_job_lost_by_a_redis_flush_is_enqueued_again(alice_client, workers, settings):
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0
    job = submit(alice_client)
    workers.queue.connection.flushdb()
    assert workers.queue.count == 0
    report = reconcile_jobs()
    assert report.requeued_lost == 1
    assert reconcile_jobs().requeued_lost == 0  # the new RQ job is alive
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1


def test_a_lost_scheduled_retry_is_enqueued_again(alice_client, workers, fake_provider, settings):
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0
    fake_provider.faults({"529": 1.0})
    job = submit(alice_client)
    workers.work_once()
    fake_provider.reset()
    workers.queue.connection.flushdb()
    LlmJob.objects.filter(id=job.id).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    assert reconcile_jobs().requeued_lost == 1
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2


def test_jobs_still_in_redis_are_left_alone(alice_client, settings):
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0
    submit(alice_client)
    assert reconcile_jobs().requeued_lost == 0


def test_a_job_whose_worker_died_is_recovered_with_an_unknown_outcome_row(
    alice_client, workers, settings
):
    settings.LLM_STALE_AFTER_SECONDS = 5
    job = submit(alice_client)
    # What a worker killed with -9 leaves: a running row, an old heartbeat, no lock.
    LlmJob.objects.filter(id=job.id).update(
        status="running",
        attempts=1,
        budget_attempts=1,
        started_at=timezone.now() - timedelta(minutes=2),
        heartbeat_at=timezone.now() - timedelta(minutes=2),
    )
    workers.queue.empty()
    assert reconcile_jobs().recovered_stale == 1
    job.refresh_from_db()
    assert job.status == "retrying" and job.error_code == "worker_lost"
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.outcome == "unknown_outcome" and entry.is_estimated and entry.cost_usd > 0
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2


def test_a_running_job_with_a_live_lock_is_not_touched(alice_client, workers, settings):
    from llmops.queues import job_lock_key

    settings.LLM_STALE_AFTER_SECONDS = 5
    job = submit(alice_client)
    LlmJob.objects.filter(id=job.id).update(
        status="running", attempts=1, heartbeat_at=timezone.now() - timedelta(minutes=2)
    )
    workers.queue.connection.set(job_lock_key(job.id), "x", ex=30)
    assert reconcile_jobs().recovered_stale == 0


def kill_process_tree(pid: int) -> None:
    """kill -9 a worker and its work horse: rq puts the horse in a process group of its own, so
    killing the worker's group alone leaves the horse running (and beating)."""
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    for child in [int(p) for p in children.split()]:
        kill_process_tree(child)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _env_for_subprocess() -> dict[str, str]:
    env = dict(os.environ)
    db = connection.settings_dict
    if connection.vendor != "sqlite":
        env["DATABASE_URL"] = database_url(db)
    else:
        pytest.skip("the worker subprocess needs a database server, not an in-memory SQLite")
    return env


def test_the_real_rqworker_command_runs_a_job(alice_client, fake_provider, settings):
    """`manage.py rqworker llm` (forking worker) as the Procfile runs it, in burst mode."""
    job = submit(alice_client)
    env = _env_for_subprocess()
    env["ANTHROPIC_BASE_URL"] = fake_provider.url
    result = subprocess.run(
        [sys.executable, "manage.py", "rqworker", "llm", "--burst", "--with-scheduler"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1


def test_a_worker_killed_mid_call_is_recovered(alice_client, fake_provider, settings):
    """kill -9 a real worker during a slow provider call; the reconciler recovers the job."""
    fake_provider.faults({}, latency_ms="20000")
    job = submit(alice_client)
    env = _env_for_subprocess()
    env.update(ANTHROPIC_BASE_URL=fake_provider.url, LLM_HEARTBEAT_SECONDS="0.5")
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "rqworker", "llm", "--burst"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while LlmJob.objects.get(id=job.id).status != "running":
        assert time.monotonic() < deadline, "the worker never started the job"
        time.sleep(0.1)
    time.sleep(1)
    kill_process_tree(worker.pid)
    worker.wait(timeout=10)
    job.refresh_from_db()
    assert job.status == "running"
    fake_provider.reset()
    settings.LLM_STALE_AFTER_SECONDS = 1
    time.sleep(3)  # the lock (ttl = 4 heartbeats = 2 s) expires
    assert reconcile_jobs().recovered_stale == 1
    job.refresh_from_db()
    assert job.status == "retrying"
    assert CostEntry.objects.get(job=job).outcome == "unknown_outcome"


def test_an_overdue_retry_whose_rq_job_is_already_queued_is_left_on_the_queue(
    alice_client, settings
):
    """Found by the chaos drill: with a backlog longer than LLM_OVERDUE_RETRY_SECONDS, each pass
    replaced the queued RQ job of an overdue retry with a new one at the back of the queue, so
    the copy a worker reached never matched the row and the job never ran."""
    settings.LLM_OVERDUE_RETRY_SECONDS = 5
    job = submit(alice_client)  # its RQ job waits on the queue, behind others
    LlmJob.objects.filter(id=job.id).update(
        status="retrying", attempts=1, next_attempt_at=timezone.now() - timedelta(seconds=60)
    )
    report = reconcile_jobs()
    assert report.requeued_overdue == 0 and report.requeued_lost == 0
    assert LlmJob.objects.get(id=job.id).rq_job_id == job.rq_job_id


@pytest.mark.parametrize(("held_for", "requeued"), [(0.001, 1), (600, 0)])
def test_a_held_queued_job_is_enqueued_again_once_its_scheduled_time_is_overdue(
    alice_client, settings, held_for, requeued
):
    """A job the rate limiter held waits in rq's scheduled registry like a retry; with the
    scheduler's worker killed nothing moves it, and rq's own fallback takes ten minutes."""
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0
    settings.LLM_OVERDUE_RETRY_SECONDS = 0
    job = submit(alice_client)
    held = job_hold(job_id=job.id, rq_job_id=job.rq_job_id, delay_seconds=held_for, reason="test")
    assert held is not None
    time.sleep(1.1)  # rq keeps a scheduled time in whole seconds
    report = reconcile_jobs()
    assert report.requeued_overdue == requeued and report.requeued_lost == 0
    after = LlmJob.objects.get(id=job.id)
    assert after.status == "queued" and (after.rq_job_id != held.rq_job_id) == bool(requeued)


@pytest.mark.parametrize(("error_code", "requeued"), [("worker_lost", 1), ("server_error", 0)])
def test_a_dead_workers_retry_is_enqueued_once_due_without_the_overdue_wait(
    alice_client, settings, error_code, requeued
):
    """The worker that died may have held rq's scheduler (its lock outlives it by a minute), so
    its job's retry goes as soon as it is due; any other retry is given
    LLM_OVERDUE_RETRY_SECONDS for the scheduler first (jobs/reconciler.py, WORKER_LOST)."""
    settings.LLM_OVERDUE_RETRY_SECONDS = 15
    job = submit(alice_client)
    # A retry whose RQ job waits in rq's scheduled registry, due a second ago.
    held = job_hold(job_id=job.id, rq_job_id=job.rq_job_id, delay_seconds=600, reason="test")
    assert held is not None
    LlmJob.objects.filter(id=job.id).update(
        status="retrying",
        attempts=1,
        error_code=error_code,
        next_attempt_at=timezone.now() - timedelta(seconds=1),
    )
    report = reconcile_jobs()
    assert report.requeued_overdue == requeued and report.requeued_lost == 0
    after = LlmJob.objects.get(id=job.id)
    assert (after.rq_job_id != held.rq_job_id) == bool(requeued)
    # Not yet due: left to the scheduler, whatever its reason.
    LlmJob.objects.filter(id=job.id).update(
        status="retrying", next_attempt_at=timezone.now() + timedelta(seconds=5)
    )
    assert reconcile_jobs().requeued_overdue == 0
