"""Money held for a call stays held until that call's cost is booked or the call is known not
to have been sent (issue 18, fault 2): no clock ends a reservation; the reconciler's booking of
a dead worker's attempt settles it; only its own copy (or the reconciler, once that copy is
gone) releases one that was never claimed; and the attempt is booked at the reservation's price.

Real worker processes killed with -9, the real reconciler and runner, the fake provider over
HTTP, MariaDB and Redis; timeouts scaled down.
"""

import threading
import time
from datetime import timedelta
from decimal import Decimal

import django_rq
import pytest
from django.db import connection
from django.utils import timezone

from jobs.models import LlmJob
from jobs.reconciler import reconcile_jobs
from jobs.runner import _start, job_run
from jobs.selectors import job_for_run
from jobs.services import job_claim
from ledger.budgets import BudgetRefusal, Reservation, budget_reserve, budget_usage
from ledger.models import Budget, BudgetReservation, BudgetWindow, CostEntry, ModelPrice
from ledger.selectors import price_for_model
from llmops.queues import LLM_QUEUE, job_lock_key
from tests.conftest import FakeProvider, submit
from tests.jobs.test_reconciler import kill_process_tree
from tests.jobs.test_takeover import (  # noqa: F401 - processes is a fixture
    Processes,
    processes,
    requests_seen,
    status_of,
    wait_for,
    worker_env,
)
from tests.ledger.test_budgets import FEATURE, feature_budget, one_job_bound

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def ledger_total() -> Decimal:
    return sum(
        CostEntry.objects.filter(feature=FEATURE).values_list("cost_usd", flat=True), Decimal(0)
    )


def window_of(budget: Budget) -> BudgetWindow:
    return BudgetWindow.objects.get(
        budget=budget, window_start=budget_usage(budget=budget).window_start
    )


def in_flight(job: LlmJob, fake_provider: FakeProvider) -> bool:
    return status_of(job) == LlmJob.Status.RUNNING and requests_seen(fake_provider) == 1


class Copy(threading.Thread):
    """One copy of a job's RQ job, run by the real runner on a thread of this process (with its
    own database connection, as a worker thread has)."""

    def __init__(self, job: LlmJob) -> None:
        super().__init__()
        self.job_id, self.rq_job_id = str(job.id), job.rq_job_id
        self.result: str | BaseException = "not run"

    def run(self) -> None:
        try:
            self.result = job_run(job_id=self.job_id, rq_job_id=self.rq_job_id)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.result = exc
        finally:
            connection.close()


# --- No clock ends a reservation ----------------------------------------------------------------


def test_a_worker_killed_late_in_a_long_call_holds_its_room_until_the_reconciler_books_it(
    alice_client,
    fake_provider,
    workers,
    settings,
    processes: Processes,  # noqa: F811
):
    """The issue's reproduction: a reservation used to stop counting at the job's RQ timeout,
    so while a dead worker's attempt waited for the reconciler, other jobs reserved the same
    room, and the recovery then booked its upper bound on top (`window spent $0.020020 vs hard
    limit $0.015309`)."""
    bound = one_job_bound(alice_client)
    budget = feature_budget(limit_usd=bound * Decimal("1.5"))  # one worst case, not two
    fake_provider.faults({}, latency_ms="60000")
    first = submit(alice_client, feature=FEATURE, max_tokens=16)
    # The old clock, scaled down: the RQ timeout is max(10, 1 + 8 + 1) = 10 s (jobs/timeouts.py).
    env = worker_env(
        fake_provider,
        LLM_HEARTBEAT_SECONDS="0.5",
        LLM_PROVIDER_CONNECT_TIMEOUT="1",
        LLM_STREAM_IDLE_SECONDS="8",
        LLM_JOB_TIMEOUT="10",
        LLM_JOB_TIMEOUT_MARGIN="1",
    )
    worker = processes.start(env, "rqworker", LLM_QUEUE, "--burst")
    wait_for(
        lambda: in_flight(first, fake_provider),
        timeout=30,
        what=f"the worker to start the call\n{processes.logs()}",
        every=0.05,
    )
    kill_process_tree(worker.pid)  # late in a long call: well before its 8 s read timeout
    (held,) = BudgetReservation.objects.filter(job=first)
    assert held.amount_usd == bound and held.settled_at is None
    old_expiry = held.created_at + timedelta(seconds=10)
    fake_provider.faults({}, latency_ms="0")

    # The reconciler is down or behind: the old expiry passes with the attempt unbooked.
    wait_for(lambda: timezone.now() > old_expiry, timeout=20, what="the old expiry", every=0.2)
    others = [submit(alice_client, feature=FEATURE, max_tokens=16) for _ in range(6)]
    for _ in range(4):  # each waits for the calls in flight to settle, and tries again
        workers.work_once()
        workers.release_scheduled()
    answered_meanwhile = requests_seen(fake_provider) - 1
    waiting = {status_of(job) for job in others}

    # The reconciler comes back: the dead worker's attempt is booked at its upper bound, with
    # the reservation's price, and that booking settles the reservation.
    settings.LLM_STALE_AFTER_SECONDS = 1
    redis = django_rq.get_connection(LLM_QUEUE)
    wait_for(lambda: not redis.exists(job_lock_key(first.id)), timeout=10, what="the lock to lapse")
    assert reconcile_jobs().recovered_stale == 1
    (estimate,) = CostEntry.objects.filter(job=first)
    assert estimate.outcome == CostEntry.Outcome.UNKNOWN and estimate.cost_usd == bound
    window = window_of(budget)
    assert window.spent_usd == ledger_total() <= budget.limit_usd
    assert answered_meanwhile == 0  # none of them took the held room: they waited
    assert waiting == {LlmJob.Status.QUEUED}  # held, their status unchanged
    held.refresh_from_db()
    assert held.settled_usd == bound and held.settled_at is not None

    workers.drain()  # the others no longer fit a worst case: refused for good
    for job in others:
        job.refresh_from_db()
        assert job.status == LlmJob.Status.FAILED and job.error_code == "budget_exceeded"
    assert window_of(budget).spent_usd == ledger_total() <= budget.limit_usd
    assert not BudgetReservation.objects.filter(settled_at__isnull=True).exists()


def test_the_reconciler_releases_a_reservation_no_copy_claimed_and_that_copy_cannot_claim_then(
    alice_client, settings
):
    """A copy that died between its reserve and its claim held room forever; the reconciler
    releases it once it is older than the stale threshold, not before (a live copy between
    reserve and claim keeps it), and a copy that was only slow then fails its claim rather
    than call the provider with nothing held."""
    bound = one_job_bound(alice_client)
    budget = feature_budget(limit_usd=bound * Decimal("1.5"))
    job = submit(alice_client, feature=FEATURE, max_tokens=16)
    waiting = job_for_run(job_id=str(job.id), rq_job_id=job.rq_job_id)
    assert waiting is not None
    reservation = budget_reserve(job=waiting, attempt=1)
    assert isinstance(reservation, Reservation) and reservation.rows == 1

    settings.LLM_STALE_AFTER_SECONDS = 30
    reconcile_jobs()
    assert budget_usage(budget=budget).reserved_usd == bound  # young: its copy may be alive

    settings.LLM_STALE_AFTER_SECONDS = 1

    def swept() -> bool:
        reconcile_jobs()
        return budget_usage(budget=budget).reserved_usd == 0

    wait_for(swept, timeout=10, what="the reconciler to release the unclaimed reservation")
    claimed = job_claim(
        job_id=str(job.id), rq_job_id=job.rq_job_id, seen=waiting, reservation=reservation
    )
    assert claimed is None
    job.refresh_from_db()
    assert job.status == LlmJob.Status.QUEUED and job.attempts == 0  # the claim rolled back


# --- Only its own copy releases a reservation ---------------------------------------------------


def test_a_losing_copy_of_a_job_releases_its_own_reservation_not_the_winners(
    alice_client, fake_provider, settings
):
    settings.LLM_STREAM_IDLE_SECONDS = 15.0  # the winner's 5 s call must not time out
    bound = one_job_bound(alice_client)
    budget = feature_budget(limit_usd=bound * Decimal("2.5"))
    fake_provider.faults({}, latency_ms="5000")
    job = submit(alice_client, feature=FEATURE, max_tokens=16)
    # The losing copy read the job as waiting, then stalled before its reserve (a pause long
    # enough for the per-job lock to lapse); a second copy of the RQ job (Redis failed over)
    # took the lock and started the attempt.
    losers_view = job_for_run(job_id=str(job.id), rq_job_id=job.rq_job_id)
    assert losers_view is not None
    winner = Copy(job)
    winner.start()
    wait_for(lambda: in_flight(job, fake_provider), timeout=10, what="the winner's call")

    # The loser wakes up: it reserves, loses the claim, and releases, as the runner does.
    loser = _start(
        losers_view,
        attempt=1,
        rq_job_id=job.rq_job_id,
        gate="closed",
        lock=None,
        started=time.monotonic(),
    )
    assert loser == "skipped"

    # The winner's call is still out, and its worst case is still held...
    assert status_of(job) == LlmJob.Status.RUNNING
    assert budget_usage(budget=budget).reserved_usd == bound
    # ... so two more jobs cannot both take the room it holds.
    others = [submit(alice_client, feature=FEATURE, max_tokens=16) for _ in range(2)]
    assert isinstance(budget_reserve(job=others[0], attempt=1), Reservation)
    refusal = budget_reserve(job=others[1], attempt=1)
    assert isinstance(refusal, BudgetRefusal) and refusal.action == "wait"

    winner.join(timeout=30)
    assert winner.result == "success", winner.result
    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED and job.attempts == 1
    winners, losers = (
        list(BudgetReservation.objects.filter(job=job, claimed_at__isnull=claimed))
        for claimed in (False, True)
    )
    assert [r.settled_usd for r in winners] == [job.cost_usd]
    assert [r.settled_usd for r in losers] == [Decimal(0)]
    assert window_of(budget).spent_usd == ledger_total() == job.cost_usd


# --- Booked at the price that was held ----------------------------------------------------------


@pytest.mark.parametrize("outcome", ["success", "read_timeout"])
def test_an_attempt_is_booked_at_the_price_its_reservation_used_when_the_price_changes_mid_call(
    alice_client, fake_provider, settings, outcome
):
    bound = one_job_bound(alice_client)
    budget = feature_budget(limit_usd=bound)  # exactly one worst case
    if outcome == "success":
        fake_provider.faults({}, latency_ms="4000")
    else:  # a read timeout: booked at the upper bound
        settings.LLM_STREAM_IDLE_SECONDS = 4.0
        fake_provider.faults({}, latency_ms="20000")
    job = submit(alice_client, feature=FEATURE, max_tokens=16)
    held_price = price_for_model(model=job.model)
    assert held_price is not None
    copy = Copy(job)
    copy.start()
    wait_for(lambda: in_flight(job, fake_provider), timeout=10, what="the call")
    # Staff raise the model's price tenfold while the call is out.
    ModelPrice.objects.create(
        model=job.model,
        effective_from=timezone.now(),
        input_per_mtok=held_price.input_per_mtok * 10,
        output_per_mtok=held_price.output_per_mtok * 10,
        cache_write_5m_per_mtok=held_price.cache_write_5m_per_mtok * 10,
        cache_write_1h_per_mtok=held_price.cache_write_1h_per_mtok * 10,
        cache_read_per_mtok=held_price.cache_read_per_mtok * 10,
        max_output_tokens=held_price.max_output_tokens,
    )
    copy.join(timeout=30)
    assert copy.result == outcome, copy.result

    assert window_of(budget).spent_usd == ledger_total() <= budget.limit_usd
    (entry,) = CostEntry.objects.filter(job=job)
    (reservation,) = BudgetReservation.objects.filter(job=job)
    assert entry.cost_usd == reservation.settled_usd <= reservation.amount_usd == bound
    assert entry.price_id == held_price.id == reservation.price_id
    if outcome == "read_timeout":
        assert entry.is_estimated and entry.cost_usd == bound
