"""A host cut off from one service while it lives (DESIGN.md, invariant 12; jobs/heartbeat.py).

On the real stack: a real thread-pool worker (`manage.py rqworker llm`) that reaches one service
through a frozen path (tests/netcut.py ``freeze``: bytes stop, connections stay open, as a
dropped link behaves) and the others directly, four calls in flight, the real reconciler passing
with a stale threshold shorter than the freeze, the fake provider over HTTP. The host proves it
lives on the other path, so nothing is taken over; its calls finish, it records them when the
path heals, and no job reaches the provider twice. Money is checked against the provider's bill.
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
from tests.jobs.test_takeover import Processes, billed, requests_seen, wait_for, worker_env
from tests.netcut import NetCut

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices"),
    pytest.mark.slow,
]

JOBS = 4
CALL_MS = "8000"
"""How long each call lasts at the fake provider: every call must be in flight at once before
the freeze, so the last claim has to come before the first call ends. At 4 s, on a loaded
2-core machine the worker (its Redis through the test's proxy) once claimed the fourth job after
the first call had ended, and the calls were never all in flight (CI, 2026-12-07). Shorter than
the freeze: the calls end while the path is frozen."""
FREEZE_SECONDS = 12.0
"""Longer than the worker's lock ttl (4 s: four beats of 1 s) and the reconciler's stale
threshold here (3 s), by several reconciler passes."""


@pytest.fixture
def processes(tmp_path: Path) -> Any:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def database_path() -> Any:
    db = connection.settings_dict
    with NetCut(db["HOST"] or "127.0.0.1", int(db["PORT"] or 3306)) as path:
        yield path


@pytest.fixture
def redis_path() -> Any:
    pool = django_rq.get_connection(LLM_QUEUE).connection_pool.connection_kwargs
    with NetCut(pool.get("host", "127.0.0.1"), int(pool.get("port", 6379))) as path:
        yield path


def _worker(processes: Processes, fake_provider: FakeProvider, **env: str) -> Any:
    return processes.start(
        worker_env(
            fake_provider,
            LLM_HEARTBEAT_SECONDS="1",
            LLM_WORKER_DB_TIMEOUT_SECONDS="2",
            LLM_REDIS_SOCKET_TIMEOUT="3",
            LLM_RATE_LIMIT_ENABLED="False",
            **env,
        ),
        "rqworker",
        LLM_QUEUE,
        "--burst",
    )


def _all_calls_in_flight(jobs: list[LlmJob], fake_provider: FakeProvider) -> None:
    wait_for(
        lambda: requests_seen(fake_provider) == JOBS
        and LlmJob.objects.filter(id__in=[j.id for j in jobs], status="running").count() == JOBS,
        timeout=30,
        what="every call in flight",
    )
    time.sleep(0.5)


def _reconcile_through_the_freeze(jobs: list[LlmJob], settings: Any) -> dict[str, Any]:
    """Pass the reconciler again and again while the path is frozen, with a stale threshold
    shorter than the freeze; what it and the claims looked like."""
    settings.LLM_STALE_AFTER_SECONDS = 3
    redis = django_rq.get_connection(LLM_QUEUE)
    seen: dict[str, Any] = {"recovered": 0, "passes": 0, "locks_missing": 0, "stalest": 0.0}
    frozen_at = time.monotonic()
    while time.monotonic() - frozen_at < FREEZE_SECONDS:
        seen["recovered"] += reconcile_jobs().recovered_stale
        seen["passes"] += 1
        seen["locks_missing"] += sum(not redis.exists(job_lock_key(j.id)) for j in jobs)
        beats = LlmJob.objects.filter(id__in=[j.id for j in jobs]).values_list(
            "heartbeat_at", flat=True
        )
        now = timezone.now()
        seen["stalest"] = max(
            [seen["stalest"], *((now - b).total_seconds() for b in beats if b is not None)]
        )
        time.sleep(0.25)
    return seen


def _every_job_once(
    jobs: list[LlmJob], worker: subprocess.Popen[bytes], processes: Processes, fake: FakeProvider
) -> None:
    assert worker.wait(timeout=90) == 0, processes.logs()
    for job in jobs:
        job.refresh_from_db()
        assert job.status == LlmJob.Status.COMPLETED and job.attempts == 1, processes.logs()
        (entry,) = CostEntry.objects.filter(job=job)
        assert entry.outcome == CostEntry.Outcome.SUCCESS and not entry.is_estimated
    assert requests_seen(fake) == JOBS  # no job sent twice
    ledger = sum(CostEntry.objects.values_list("cost_usd", flat=True))
    assert ledger == billed(fake) > 0


def test_a_worker_whose_database_path_freezes_keeps_its_calls_and_records_them_after(
    alice_client, fake_provider, settings, processes, database_path
):
    fake_provider.faults({}, latency_ms=CALL_MS)
    jobs = [submit(alice_client) for _ in range(JOBS)]
    db = connection.settings_dict
    worker = _worker(
        processes,
        fake_provider,
        DATABASE_URL=database_url(db, host="127.0.0.1", port=database_path.port),
    )
    _all_calls_in_flight(jobs, fake_provider)
    database_path.freeze()
    seen = _reconcile_through_the_freeze(jobs, settings)
    # The rows went stale (the path was really frozen), the locks never lapsed (the beats on
    # Redis went on without waiting for the database), and nothing was taken over.
    assert seen["stalest"] > FREEZE_SECONDS - 2, seen
    assert seen["locks_missing"] == 0 and seen["recovered"] == 0, (seen, processes.logs())
    assert worker.poll() is None, processes.logs()
    database_path.thaw()
    _every_job_once(jobs, worker, processes, fake_provider)
    assert "self-fencing" not in processes.output()


def test_a_worker_whose_redis_path_freezes_keeps_its_calls(
    alice_client, fake_provider, settings, processes, redis_path
):
    fake_provider.faults({}, latency_ms=CALL_MS)
    jobs = [submit(alice_client) for _ in range(JOBS)]
    redis_db = django_rq.get_connection(LLM_QUEUE).connection_pool.connection_kwargs["db"]
    worker = _worker(
        processes, fake_provider, REDIS_URL=f"redis://127.0.0.1:{redis_path.port}/{redis_db}"
    )
    _all_calls_in_flight(jobs, fake_provider)
    redis_path.freeze()
    seen = _reconcile_through_the_freeze(jobs, settings)
    # The locks lapsed (the path was really frozen), the rows' heartbeats stayed fresh (the beats
    # on the database went on without waiting for Redis), and nothing was taken over.
    assert seen["locks_missing"] > 0, seen
    assert seen["stalest"] < 3, seen
    assert seen["recovered"] == 0, (seen, processes.logs())
    redis_path.thaw()
    _every_job_once(jobs, worker, processes, fake_provider)
    assert "self-fencing" not in processes.output()
