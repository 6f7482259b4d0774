"""A paid answer waiting for the database keeps its job's claim until it is recorded, and no
longer than the recording may take (jobs/runner.py: the heartbeat holds until the end of
``_persist``'s window).

On the real stack: a real `manage.py rqworker` process that reaches MariaDB through a real
network cut (tests/netcut.py) and Redis directly, the real reconciler, the fake provider over
HTTP. The database is cut off while the call is in flight and stays cut off longer than the
lock's ttl and the stale threshold.
"""

import subprocess
import time
from pathlib import Path
from typing import Any

import django_rq
import pytest
from django.db import connection
from django.utils import timezone

from jobs.models import LlmJob
from jobs.reconciler import reconcile_jobs
from ledger.models import CostEntry
from llmops.env import database_url
from llmops.queues import LLM_QUEUE, job_lock_key
from tests.conftest import FakeProvider, submit
from tests.jobs.test_takeover import (
    Processes,
    billed,
    nothing_in_flight,
    requests_seen,
    status_of,
    wait_for,
    worker_env,
)
from tests.netcut import NetCut

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

LOCK_TTL_SECONDS = 2  # four heartbeats of 0.5 s (the 2 s floor)


@pytest.fixture
def processes(tmp_path: Path) -> Any:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def database_cut() -> Any:
    db = connection.settings_dict
    with NetCut(db["HOST"] or "127.0.0.1", int(db["PORT"] or 3306)) as cut:
        yield cut


def _worker_on(
    cut: NetCut, processes: Processes, fake_provider: FakeProvider, record_seconds: str
) -> subprocess.Popen[bytes]:
    db = connection.settings_dict
    env = worker_env(
        fake_provider,
        DATABASE_URL=database_url(db, host="127.0.0.1", port=cut.port),
        LLM_HEARTBEAT_SECONDS="0.5",
        LLM_RECORD_RETRY_SECONDS=record_seconds,
        LLM_RATE_LIMIT_ENABLED="False",
    )
    return processes.start(
        env, "rqworker", LLM_QUEUE, "--burst", "--worker-class", "rq.worker.SimpleWorker"
    )


def _cut_during_the_call(
    job: LlmJob, cut: NetCut, processes: Processes, fake_provider: FakeProvider
) -> None:
    """Cut the database off while the call is in flight; return once the call has returned."""
    wait_for(
        lambda: status_of(job) == LlmJob.Status.RUNNING and requests_seen(fake_provider) == 1,
        timeout=30,
        what=f"the worker to start the call\n{processes.logs()}",
    )
    cut.cut()
    wait_for(lambda: nothing_in_flight(fake_provider), timeout=20, what="the call to return")


def test_a_paid_answer_waiting_for_the_database_keeps_its_claim_until_recorded(
    alice_client, fake_provider, settings, processes, database_cut
):
    fake_provider.faults({}, latency_ms="2000")
    job = submit(alice_client)
    worker = _worker_on(database_cut, processes, fake_provider, record_seconds="60")
    _cut_during_the_call(job, database_cut, processes, fake_provider)
    returned_at = time.monotonic()

    # The reconciler looks again and again, for three lock ttls, with a 1 s stale threshold:
    # the row's heartbeat goes stale (the worker cannot write it), but the lock holds.
    settings.LLM_STALE_AFTER_SECONDS = 1
    redis = django_rq.get_connection(LLM_QUEUE)
    recovered, locked = [], []
    while time.monotonic() - returned_at < 3 * LOCK_TTL_SECONDS:
        recovered.append(reconcile_jobs().recovered_stale)
        locked.append(bool(redis.exists(job_lock_key(job.id))))
        time.sleep(0.25)
    heartbeat_at = LlmJob.objects.values_list("heartbeat_at", flat=True).get(id=job.id)
    assert heartbeat_at is not None
    assert (timezone.now() - heartbeat_at).total_seconds() > 3 * LOCK_TTL_SECONDS - 1
    assert set(recovered) == {0}, (recovered, processes.logs())
    assert all(locked), locked
    assert worker.poll() is None, processes.logs()

    database_cut.restore()
    assert worker.wait(timeout=60) == 0, processes.logs()
    assert "recording an attempt failed on the database" in processes.output()
    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED and job.attempts == 1 and job.output_text
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.outcome == CostEntry.Outcome.SUCCESS and not entry.is_estimated
    assert entry.cost_usd == billed(fake_provider) > 0
    assert requests_seen(fake_provider) == 1  # nothing took over: no second call
    assert not redis.exists(job_lock_key(job.id))


def test_the_claim_held_for_recording_ends_with_the_recording_window(
    alice_client, fake_provider, settings, processes, database_cut
):
    fake_provider.faults({}, latency_ms="2000")
    job = submit(alice_client)
    worker = _worker_on(database_cut, processes, fake_provider, record_seconds="2")
    _cut_during_the_call(job, database_cut, processes, fake_provider)
    returned_at = time.monotonic()
    redis = django_rq.get_connection(LLM_QUEUE)
    # The worker gives up recording after 2 s; its lock lapses a ttl later at most.
    wait_for(
        lambda: not redis.exists(job_lock_key(job.id)),
        timeout=2 + LOCK_TTL_SECONDS + 3,
        what=f"the lock to lapse\n{processes.logs()}",
    )
    print(f"the claim lapsed {time.monotonic() - returned_at:.1f} s after the call returned")
    settings.LLM_STALE_AFTER_SECONDS = 1
    wait_for(
        lambda: reconcile_jobs().recovered_stale == 1,
        timeout=5,
        what=f"the reconciler to take the job over\n{processes.logs()}",
    )
    database_cut.restore()
    worker.wait(timeout=30)
    job.refresh_from_db()
    assert job.status == LlmJob.Status.RETRYING and job.attempts == 1
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.outcome == CostEntry.Outcome.UNKNOWN and entry.reason_code == "worker_lost"
