"""Every attempt has a wall-clock deadline, whatever the worker class (providers/call_deadline.py).

A read timeout bounds the time between two bytes, not the call: the fake provider's ``trickle``
fault sends its answer one byte a second, so a 3 s read timeout never fires. On the real stack
(the fake provider over HTTP, real `manage.py rqworker` processes, MariaDB and Redis):

- the call ends at its deadline (connect + read timeout, scaled from max_tokens) and is booked
  as an unknown outcome at its upper bound, with its lock and budget reservation settled, on the
  forking worker, the SimpleWorker and the thread-pool worker alike;
- on the thread-pool worker its concurrency_key slot is freed, and a job waiting on the key runs;
- the attempt's heartbeat stops extending the lock, the slot and heartbeat_at at the deadline,
  and cuts the call off at its sockets;
- a SIGTERM'd thread-pool worker exits within the longest deadline in flight, and leaves a job
  stuck past every deadline to the reconciler.
"""

import os
import signal
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import django_rq
import pytest
from django.db import connection
from django.utils import timezone

from jobs.heartbeat import Heartbeat as _Heartbeat
from jobs.models import LlmJob
from jobs.timeouts import job_timeout_for
from ledger.models import Budget, BudgetReservation, CostEntry
from ledger.services import job_upper_bound_cost
from llmops.queues import LLM_QUEUE, concurrency_key_slots_key, job_lock_key
from providers.base import ProviderOutcome, ProviderRequest
from providers.call_deadline import CallDeadline
from providers.limits import call_deadline_for
from providers.registry import get_provider
from runtime.threaded_worker import SHUTDOWN_MARGIN_SECONDS
from tests.conftest import FakeProvider, submit
from tests.jobs.test_takeover import Processes, requests_seen, wait_for, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

BODY = {
    "model": "claude-haiku-4-5",
    "max_tokens": 256,
    "messages": [{"role": "user", "content": "Classify: please refund my order"}],
}

# Read timeout 3 s (the floor; the scale 0 drops the part scaled from max_tokens), connect 1 s:
# a deadline of 4 s. The fake provider's answer trickles for several minutes.
SHORT_DEADLINE = {
    "LLM_STREAM_IDLE_SECONDS": "3",
    "LLM_CALL_DEADLINE_SCALE": "0",
    "LLM_PROVIDER_CONNECT_TIMEOUT": "1",
    "LLM_JOB_TIMEOUT": "10",
    "LLM_JOB_TIMEOUT_MARGIN": "2",
    "LLM_HEARTBEAT_SECONDS": "0.5",
    "LLM_RATE_LIMIT_ENABLED": "False",
    "LLM_RETRY_DELAY_SCALE": "0.001",
}
DEADLINE_SECONDS = 4.0


@pytest.fixture
def processes(tmp_path: Path) -> Any:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def short_deadline(settings: Any) -> None:
    settings.LLM_STREAM_IDLE_SECONDS = 3.0
    settings.LLM_CALL_DEADLINE_SCALE = 0.0
    settings.LLM_PROVIDER_CONNECT_TIMEOUT = 1.0


def statuses(*jobs: LlmJob) -> set[str]:
    return set(LlmJob.objects.filter(id__in=[j.id for j in jobs]).values_list("status", flat=True))


def trickled_calls_ended(fake_provider: FakeProvider) -> bool:
    """Every trickling answer ended at the fake provider (its client went away)."""
    stats = fake_provider.stats()
    return stats["in_flight"] == 0


# --- The call itself ------------------------------------------------------------------------------


def test_a_trickling_answer_never_trips_the_read_timeout_but_ends_at_the_deadline(
    fake_provider, short_deadline
):
    fake_provider.faults({"trickle": 1.0})
    get_provider().warm_up()  # as the runner does before it starts a deadline
    started = time.monotonic()
    outcome = get_provider().call(
        ProviderRequest(
            body=BODY,
            idempotency_key="trickle-1",
            read_timeout=3.0,
            deadline=CallDeadline(DEADLINE_SECONDS),
        )
    )
    elapsed = time.monotonic() - started
    print(f"trickling call ended after {elapsed:.2f} s (deadline {DEADLINE_SECONDS} s)")
    assert DEADLINE_SECONDS <= elapsed < DEADLINE_SECONDS + 1.0
    assert outcome.kind == "read_timeout" and outcome.outcome_unknown
    assert outcome.message.startswith("Deadline exceeded"), outcome.message
    # The connection was closed: the fake provider stopped trickling (and billed the call).
    wait_for(lambda: trickled_calls_ended(fake_provider), timeout=5, what="the trickle to end")
    assert fake_provider.stats()["timed_out"] == 1


def test_a_cut_from_another_thread_ends_a_blocked_read_at_once(fake_provider, short_deadline):
    """The backstop the heartbeat uses: shutting the call's sockets down from another thread."""
    fake_provider.faults({"trickle": 1.0})
    get_provider().warm_up()
    deadline = CallDeadline(60.0)
    outcomes: list[ProviderOutcome] = []
    call = threading.Thread(
        target=lambda: outcomes.append(
            get_provider().call(
                ProviderRequest(body=BODY, idempotency_key="trickle-2", deadline=deadline)
            )
        )
    )
    call.start()
    wait_for(lambda: fake_provider.stats()["in_flight"] == 1, timeout=5, what="the call")
    time.sleep(1.5)  # a byte or two of the body read
    cut_at = time.monotonic()
    assert deadline.cut()
    call.join(timeout=5)
    assert not call.is_alive() and time.monotonic() - cut_at < 1.0
    (outcome,) = outcomes
    assert outcome.kind == "read_timeout" and outcome.message.startswith("Deadline exceeded")
    assert not deadline.cut()  # the call is over: nothing left to cut
    wait_for(lambda: trickled_calls_ended(fake_provider), timeout=5, what="the trickle to end")


# --- Every worker class ---------------------------------------------------------------------------


WORKER_CLASSES = {
    "forking": ("1", ()),
    "simple": ("1", ("--worker-class", "rq.worker.SimpleWorker")),
    "threaded": ("4", ()),
}


@pytest.mark.parametrize("worker_class", list(WORKER_CLASSES))
def test_a_trickling_call_ends_at_its_deadline_as_an_unknown_outcome_on_every_worker(
    alice_client, fake_provider, processes, short_deadline, worker_class
):
    concurrency, args = WORKER_CLASSES[worker_class]
    budget = Budget.objects.create(
        scope=Budget.Scope.FEATURE, feature="email-classify", limit_usd=Decimal("100")
    )
    fake_provider.faults({"trickle": 1.0})
    job = submit(alice_client, model="claude-haiku-4-5", max_tokens=256)
    assert call_deadline_for(256) == DEADLINE_SECONDS
    env = worker_env(fake_provider, LLM_WORKER_CONCURRENCY=concurrency, **SHORT_DEADLINE)
    worker = processes.start(env, "rqworker", LLM_QUEUE, "--burst", *args)
    wait_for(
        lambda: requests_seen(fake_provider) == 1,
        timeout=30,
        what=f"the call to start\n{processes.logs()}",
    )
    sent_at = time.monotonic()
    # The burst worker ends once the attempt is booked (its retry is scheduled for later).
    wait_for(lambda: worker.poll() is not None, timeout=15, what=f"the end\n{processes.logs()}")
    print(f"{worker_class}: the worker ended {time.monotonic() - sent_at:.1f} s after the call")
    assert worker.returncode == 0, processes.logs()

    job.refresh_from_db()
    assert job.status == LlmJob.Status.RETRYING and job.attempts == 1, processes.logs()
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.outcome == CostEntry.Outcome.UNKNOWN and entry.is_estimated
    assert entry.error_message.startswith("Deadline exceeded"), entry.error_message
    assert (
        DEADLINE_SECONDS * 1000 - 1500 <= (entry.latency_ms or 0) < DEADLINE_SECONDS * 1000 + 1000
    )
    assert entry.cost_usd == job_upper_bound_cost(job=job) > 0
    # The lock is released and the reservation settled by the attempt's ledger row.
    assert not django_rq.get_connection(LLM_QUEUE).exists(job_lock_key(job.id))
    (reservation,) = BudgetReservation.objects.filter(budget=budget, job=job)
    assert reservation.settled_at is not None and reservation.settled_usd == entry.cost_usd
    wait_for(lambda: trickled_calls_ended(fake_provider), timeout=5, what="the trickle to end")


def test_on_the_thread_pool_a_call_past_its_deadline_frees_its_slot_and_the_job_is_retried(
    alice_client, fake_provider, processes, short_deadline
):
    # The first call trickles; every call after it is answered at once.
    fake_provider.faults({"trickle": 1.0})
    first = submit(
        alice_client, concurrency_key="doc-7", messages=[{"role": "user", "content": "a"}]
    )
    env = worker_env(
        fake_provider,
        LLM_WORKER_CONCURRENCY="4",
        LLM_CONCURRENCY_KEY_WAIT_SECONDS="0.5",
        **SHORT_DEADLINE,
    )
    processes.start(env, "rqworker", LLM_QUEUE, "--with-scheduler")
    wait_for(
        lambda: requests_seen(fake_provider) == 1,
        timeout=30,
        what=f"the first call to start\n{processes.logs()}",
    )
    sent_at = time.monotonic()
    fake_provider.faults({})
    second = submit(
        alice_client, concurrency_key="doc-7", messages=[{"role": "user", "content": "b"}]
    )
    redis = django_rq.get_connection(LLM_QUEUE)
    slots = concurrency_key_slots_key("doc-7")
    assert redis.zscore(slots, str(first.id)) is not None
    # The slot is the first job's until its deadline; then it is freed, and both jobs complete.
    wait_for(
        lambda: redis.zscore(slots, str(first.id)) is None,
        timeout=DEADLINE_SECONDS + 3,
        what=f"the slot to be freed\n{processes.logs()}",
    )
    freed_after = time.monotonic() - sent_at
    print(f"the slot was freed {freed_after:.1f} s after the call was sent")
    assert freed_after < DEADLINE_SECONDS + 1.5
    assert LlmJob.objects.get(id=second.id).attempts == 0  # it waited on the key, no attempt
    wait_for(
        lambda: statuses(first, second) == {LlmJob.Status.COMPLETED},
        timeout=30,
        what=f"both jobs to complete\n{processes.logs()}",
    )
    first.refresh_from_db()
    assert first.attempts == 2
    assert [
        (e.attempt, e.outcome, e.error_message.startswith("Deadline exceeded"))
        for e in first.cost_entries.order_by("attempt")
    ] == [(1, CostEntry.Outcome.UNKNOWN, True), (2, CostEntry.Outcome.SUCCESS, False)]
    assert not redis.exists(job_lock_key(first.id))
    wait_for(lambda: trickled_calls_ended(fake_provider), timeout=5, what="the trickle to end")


# --- The heartbeat ------------------------------------------------------------------------------


def test_the_heartbeat_stops_extending_at_the_deadline_and_cuts_the_call(alice_client, settings):
    settings.LLM_HEARTBEAT_SECONDS = 0.2  # lock and slot leases: the 2 s floor
    job = submit(alice_client, concurrency_key="doc-9")
    LlmJob.objects.filter(id=job.id).update(status="running", attempts=1)
    redis = django_rq.get_connection(LLM_QUEUE)
    lock = redis.lock(job_lock_key(job.id), timeout=2, blocking=False, thread_local=False)
    assert lock.acquire(blocking=False)
    slots = concurrency_key_slots_key("doc-9")
    redis.zadd(slots, {str(job.id): redis.time()[0] * 1000 + 2000})

    deadline = CallDeadline(1.5)
    with deadline, _Heartbeat(job.id, lock, "doc-9", deadline) as heartbeat:
        # Before the deadline: the beats extend all three.
        wait_for(lambda: heartbeat.beats >= 3, timeout=5, what="beats")
        wait_for(lambda: deadline.passed(), timeout=5, what="the deadline")
        time.sleep(0.3)  # the heartbeat's turn at the deadline
        assert deadline.was_cut  # the call (still running here) was cut off at its sockets
        beats = heartbeat.beats
        heartbeat_at = LlmJob.objects.values_list("heartbeat_at", flat=True).get(id=job.id)
        lock_ttl, slot_until = redis.pttl(job_lock_key(job.id)), redis.zscore(slots, str(job.id))
        time.sleep(1.0)  # five beat intervals past the deadline: none of them beat
        assert heartbeat.beats == beats
        assert LlmJob.objects.values_list("heartbeat_at", flat=True).get(id=job.id) == heartbeat_at
        assert redis.pttl(job_lock_key(job.id)) < lock_ttl - 500
        assert redis.zscore(slots, str(job.id)) == slot_until
        # The call ended: the claim is held again while its result is recorded, until told.
        heartbeat.hold_until(time.monotonic() + 1.0)
        wait_for(lambda: heartbeat.beats > beats, timeout=2, what="a beat while recording")
        assert redis.pttl(job_lock_key(job.id)) > 1500
        time.sleep(1.2)
        recorded_beats = heartbeat.beats
        time.sleep(0.6)
        assert heartbeat.beats == recorded_beats
    assert heartbeat_at is not None and heartbeat_at < timezone.now()
    connection.close()


# --- Warm shutdown --------------------------------------------------------------------------------


@pytest.mark.quiet  # a process's exit timed against a 3 s margin: no other test's load beside it
def test_sigterm_with_a_trickling_call_exits_at_its_deadline_and_books_it(
    alice_client, fake_provider, processes, short_deadline
):
    fake_provider.faults({"trickle": 1.0})
    job = submit(alice_client)
    env = worker_env(fake_provider, LLM_WORKER_CONCURRENCY="4", **SHORT_DEADLINE)
    worker = processes.start(env, "rqworker", LLM_QUEUE, "--with-scheduler")
    wait_for(
        lambda: requests_seen(fake_provider) == 1,
        timeout=30,
        what=f"the call to start\n{processes.logs()}",
    )
    sent_at = time.monotonic()
    os.kill(worker.pid, signal.SIGTERM)
    bound = job_timeout_for(256)
    wait_for(
        lambda: worker.poll() is not None,
        timeout=bound + 5,
        what=f"the worker to exit\n{processes.logs()}",
    )
    exited_after = time.monotonic() - sent_at
    print(f"SIGTERM: the worker exited {exited_after:.1f} s after the call was sent")
    assert worker.returncode == 0, processes.logs()
    assert exited_after < DEADLINE_SECONDS + 3
    job.refresh_from_db()
    assert job.status == LlmJob.Status.RETRYING and job.attempts == 1
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.outcome == CostEntry.Outcome.UNKNOWN and entry.error_message.startswith("Deadline")
    wait_for(lambda: trickled_calls_ended(fake_provider), timeout=5, what="the trickle to end")


def test_warm_shutdown_leaves_a_job_stuck_past_its_timeout_to_the_reconciler(
    fake_provider, processes
):
    queue = django_rq.get_queue(LLM_QUEUE)
    stuck = queue.enqueue("time.sleep", 60, job_timeout=2)
    env = worker_env(fake_provider, LLM_WORKER_CONCURRENCY="4", LLM_HEARTBEAT_SECONDS="0.5")
    worker = processes.start(env, "rqworker", LLM_QUEUE)
    wait_for(
        lambda: stuck.id in queue.started_job_registry.get_job_ids(cleanup=False),
        timeout=30,
        what=f"the job to start\n{processes.logs()}",
    )
    started_at = time.monotonic()
    os.kill(worker.pid, signal.SIGTERM)
    wait_for(
        lambda: worker.poll() is not None,
        timeout=20,
        what=f"the worker to exit\n{processes.logs()}",
    )
    exited_after = time.monotonic() - started_at
    print(f"warm shutdown with a stuck job: exited after {exited_after:.1f} s")
    assert worker.returncode == 0, processes.logs()
    # Its RQ timeout (2 s) and the margin (5 s), then the process's own end; not the 60 s sleep.
    assert exited_after < 2 + SHUTDOWN_MARGIN_SECONDS + 6
    assert "leaving them to the reconciler" in processes.output(), processes.logs()
    assert stuck.id in processes.output()
