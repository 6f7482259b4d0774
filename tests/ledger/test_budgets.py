"""Budgets hold under real concurrency, release deferred jobs at the reset, refuse spent ones at
submit, and alert once per window. MariaDB, Redis and the fake provider are real."""

import threading
from datetime import timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any

import django_rq
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from alerts.models import Alert
from dlq.models import FailureRecord
from jobs.models import LlmJob
from jobs.runner import job_run
from ledger.budgets import (
    Reservation,
    budget_release,
    budget_reserve,
    budget_usage,
    window_bounds,
)
from ledger.models import Budget, BudgetReservation, BudgetWindow, CostEntry
from ledger.services import job_upper_bound_cost
from llmops.queues import LLM_QUEUE
from tests.conftest import job_body, submit
from tests.threads import in_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

FEATURE = "bulk-summaries"


def feature_budget(**fields: Any) -> Budget:
    defaults: dict[str, Any] = {
        "scope": Budget.Scope.FEATURE,
        "feature": FEATURE,
        "period": Budget.Period.MONTH,
        "limit_usd": Decimal("1"),
    }
    return Budget.objects.create(**{**defaults, **fields})


def one_job_bound(alice_client) -> Decimal:
    """The worst case of one attempt of the jobs these tests submit."""
    body = job_body(feature=FEATURE, max_tokens=16)
    return job_upper_bound_cost(
        job=LlmJob(
            feature=FEATURE,
            model=body["model"],
            messages=body["messages"],
            max_tokens=body["max_tokens"],
        )
    )


def run_concurrently(job_ids: list[str], workers: int) -> None:
    """``workers`` threads, each with its own database connection, run the jobs' RQ jobs at
    once, as that many worker processes would."""
    queue = django_rq.get_queue(LLM_QUEUE)
    pending = list(job_ids)
    lock = threading.Lock()

    def work(start: threading.Barrier) -> None:
        start.wait()
        while True:
            with lock:
                if not pending:
                    return
                job_id = pending.pop()
            row = LlmJob.objects.get(id=job_id)
            queue.remove(row.rq_job_id)
            job_run(job_id=job_id, rq_job_id=row.rq_job_id)

    in_threads(workers, work, timeout=120)


def test_twenty_concurrent_workers_never_push_settled_spend_past_a_hard_limit(
    alice_client, fake_provider, workers
):
    fake_provider.faults({}, latency_ms="150-400")
    bound = one_job_bound(alice_client)
    budget = feature_budget(limit_usd=bound * 5)  # about ten jobs' real cost, five worst cases
    jobs = [submit(alice_client, feature=FEATURE, max_tokens=16) for _ in range(20)]
    ids = [str(job.id) for job in jobs]

    for _ in range(40):
        waiting = list(
            LlmJob.objects.filter(id__in=ids, status__in=LlmJob.WAITING_STATUSES).values_list(
                "id", flat=True
            )
        )
        if not waiting:
            break
        workers.release_scheduled()
        run_concurrently([str(i) for i in waiting], workers=20)
    statuses = dict(LlmJob.objects.filter(id__in=ids).values_list("id", "status"))
    assert set(statuses.values()) <= {"completed", "failed"}, statuses  # none lost or stuck
    failed = LlmJob.objects.filter(id__in=ids, status="failed")
    assert all(job.error_code == "budget_exceeded" for job in failed)
    assert all(
        r.reason_code == "budget_exceeded" and r.severity == "WARNING"
        for r in FailureRecord.objects.filter(job__in=failed)
    )
    completed = LlmJob.objects.filter(id__in=ids, status="completed").count()
    assert completed >= 5 and failed.count() >= 1

    spent = CostEntry.objects.filter(feature=FEATURE).values_list("cost_usd", flat=True)
    ledger_total = sum(spent, Decimal(0))
    window = BudgetWindow.objects.get(budget=budget)
    assert window.spent_usd == ledger_total <= budget.limit_usd
    assert not BudgetReservation.objects.filter(settled_at__isnull=True).exists()
    # A rejected job used no attempt and left no ledger row: it never called the provider.
    assert all(job.attempts == 0 for job in failed)
    assert fake_provider.stats()["requests"] == completed


def spend(budget: Budget, amount: Decimal, *, alice) -> None:
    """Book real ledger spend in the budget's scope (a completed attempt of some job)."""
    from ledger.services import AttemptRecord, cost_entry_record_attempt

    job = LlmJob.objects.create(
        user=alice,
        feature=FEATURE,
        model="claude-haiku-4-5",
        messages=[{"role": "user", "content": "x"}],
        max_tokens=16,
        request_fingerprint="x",
        status="completed",
    )
    from ledger.models import ModelPrice

    price = ModelPrice.objects.filter(model="claude-haiku-4-5").first()
    assert price is not None
    # Output tokens at $5 per million: amount / 5e-6 tokens.
    tokens = int(amount / (price.output_per_mtok / Decimal(1_000_000)))
    cost_entry_record_attempt(
        job=job,
        attempt=1,
        record=AttemptRecord(outcome=CostEntry.Outcome.SUCCESS, usage={"output_tokens": tokens}),
    )


def test_a_spent_budget_refuses_at_submit_with_429_and_writes_nothing(alice, alice_client):
    budget = feature_budget(limit_usd=Decimal("0.01"))
    spend(budget, Decimal("0.01"), alice=alice)
    before = LlmJob.objects.count()
    response = alice_client.post("/api/v1/jobs/", job_body(feature=FEATURE), format="json")
    assert response.status_code == 429, response.content
    body = response.json()
    assert body["code"] == "budget_exceeded"
    _, reset = window_bounds(budget.period)
    retry_after = int(response["Retry-After"])
    assert abs(retry_after - (reset - timezone.now()).total_seconds()) < 5
    assert body["detail"]["budgets"][0]["budget"] == f"feature:{FEATURE}"
    assert LlmJob.objects.count() == before
    # Another feature is not affected.
    assert alice_client.post("/api/v1/jobs/", job_body(), format="json").status_code == 202


def test_a_job_that_does_not_fit_a_reject_budget_is_dead_lettered_without_a_call(
    alice, alice_client, workers, fake_provider
):
    bound = one_job_bound(alice_client)
    budget = feature_budget(limit_usd=bound * 2)
    job = submit(alice_client, feature=FEATURE, max_tokens=16)
    spend(budget, bound * Decimal("1.5"), alice=alice)  # what is left cannot take a worst case
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.error_code == "budget_exceeded"
    assert job.error_severity == "WARNING" and job.attempts == 0
    assert not CostEntry.objects.filter(job=job).exists()
    assert FailureRecord.objects.get(job=job).reason_code == "budget_exceeded"
    assert fake_provider.stats()["requests"] == 0

    # Exhausted now (settled spend stops short of the limit, at the worst case): submit says so.
    again = alice_client.post("/api/v1/jobs/", job_body(feature=FEATURE), format="json")
    assert again.status_code == 429 and again.json()["code"] == "budget_exceeded"
    # Staff raise the limit: the window gets a new chance.
    budget.limit_usd = bound * 4
    budget.save()
    assert submit(alice_client, feature=FEATURE, max_tokens=16).status == "queued"


def test_a_deferred_job_is_held_until_the_window_resets_then_runs(
    alice, alice_client, workers, fake_provider, monkeypatch
):
    bound = one_job_bound(alice_client)
    budget = feature_budget(limit_usd=bound * 2, period=Budget.Period.DAY, on_exceed="defer")
    job = submit(alice_client, feature=FEATURE, max_tokens=16)
    spend(budget, bound * Decimal("1.5"), alice=alice)
    workers.work_once()
    job.refresh_from_db()
    _, reset = window_bounds(budget.period)
    assert job.status == "retrying" and job.error_code == "budget_exceeded"
    assert job.next_attempt_at == reset and job.attempts == 0
    (scheduled, delay) = [(j, j) for j in workers.scheduled()][0]
    assert scheduled.id == job.rq_job_id

    # Nothing runs it early: a copy released now is refused as not due.
    workers.release_scheduled()
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "retrying" and fake_provider.stats()["requests"] == 0

    # The clock passes the reset: the new window has room, and the held job runs.
    real_now = timezone.now
    monkeypatch.setattr(
        timezone, "now", lambda: real_now() + (reset - real_now()) + timedelta(seconds=5)
    )
    LlmJob.objects.filter(id=job.id).update(rq_job_id="")  # its RQ copy was consumed above
    from jobs.reconciler import requeue_waiting_jobs

    assert requeue_waiting_jobs(grace_seconds=0).requeued_lost == 1
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    assert budget_usage(budget=budget).window_start == reset


def test_soft_and_exhausted_alerts_go_out_once_per_window(alice, settings):
    settings.ALERT_ROUTES = {}  # recorded as unrouted: the rows are what this test counts
    budget = feature_budget(limit_usd=Decimal("0.010000"), soft_alert_percent=80)
    spend(budget, Decimal("0.0050"), alice=alice)
    assert not Alert.objects.exists()
    spend(budget, Decimal("0.0031"), alice=alice)  # 81 %
    spend(budget, Decimal("0.0005"), alice=alice)  # 86 %: no second warning
    (warning,) = Alert.objects.all()
    assert warning.severity == "WARNING" and warning.source == "budget"
    assert f"feature:{FEATURE}" in warning.title
    spend(budget, Decimal("0.0020"), alice=alice)  # 106 %: exhausted (a correction can pass 100)
    spend(budget, Decimal("0.0010"), alice=alice)
    severities = sorted(Alert.objects.values_list("severity", flat=True))
    assert severities == ["ERROR", "WARNING"]
    window = BudgetWindow.objects.get(budget=budget)
    assert window.soft_alerted_at and window.exhausted_alerted_at
    assert window.spent_usd == sum(
        CostEntry.objects.filter(feature=FEATURE).values_list("cost_usd", flat=True), Decimal(0)
    )


@pytest.mark.parametrize("earlier_copy", ["released it", "died before its claim"])
def test_an_attempt_reserved_by_a_copy_that_never_claimed_it_is_reserved_again(
    alice_client, workers, earlier_copy
):
    """Found by the chaos drill: the unique key on (budget, job, attempt) refused the next run of
    an attempt an earlier copy had reserved without claiming it, and the job never ran again."""
    budget = feature_budget(limit_usd=Decimal("10"))
    job = submit(alice_client, feature=FEATURE, max_tokens=16)
    reservation = budget_reserve(job=job, attempt=1)
    assert isinstance(reservation, Reservation) and reservation.token is not None
    if earlier_copy == "released it":
        budget_release(reservation=reservation)

    workers.drain()

    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    (reservation,) = BudgetReservation.objects.filter(job=job)
    assert reservation.attempt == 1 and reservation.settled_usd == job.cost_usd
    assert budget_usage(budget=budget).reserved_usd == 0


def test_spend_booked_while_a_budget_was_disabled_counts_once_it_is_enabled_again(
    alice_client, workers, fake_provider
):
    """Issue 18, fault 3: the window missed what was spent while its budget was disabled, so
    enabled again it admitted spend the ledger already counted (window 0.020020, ledger
    0.030030, limit 0.025, and the next job ran)."""
    bound = one_job_bound(alice_client)
    budget = feature_budget(limit_usd=Decimal("10"))
    for _ in range(2):
        submit(alice_client, feature=FEATURE, max_tokens=16)
    workers.drain()
    budget.enabled = False
    budget.save()
    while_disabled = submit(alice_client, feature=FEATURE, max_tokens=16)
    workers.drain()
    while_disabled.refresh_from_db()
    assert while_disabled.status == "completed" and while_disabled.cost_usd > 0
    ledger = sum(
        CostEntry.objects.filter(feature=FEATURE).values_list("cost_usd", flat=True), Decimal(0)
    )

    # Enabled again, with room for a worst case only if the disabled spend were forgotten.
    budget.enabled = True
    budget.limit_usd = (ledger + bound - while_disabled.cost_usd / 2).quantize(
        Decimal("0.000001"), rounding=ROUND_DOWN
    )
    budget.save()
    assert BudgetWindow.objects.get(budget=budget).spent_usd == ledger
    assert budget_usage(budget=budget).spent_usd == ledger

    requests = fake_provider.stats()["requests"]
    # The window holds the disabled spend: the next job's worst case does not fit, and it is
    # refused at submit (issue 37, fault 4), before any worker could send it.
    refused = alice_client.post("/api/v1/jobs/", job_body(feature=FEATURE, max_tokens=16),
                                format="json")  # fmt: skip
    assert refused.status_code == 429 and refused.json()["code"] == "budget_exceeded"
    workers.drain()
    assert fake_provider.stats()["requests"] == requests
    assert BudgetWindow.objects.get(budget=budget).spent_usd == ledger <= budget.limit_usd


def test_a_job_waiting_for_the_calls_in_flight_is_held_without_a_transition(
    alice_client, workers, fake_provider
):
    """Found by the chaos drill (issue 18): a budget's ``wait`` moved the job to ``retrying``, a
    transition the metrics counted and the ledger cannot show (``metrics = ledger``: 14 != 9)."""
    from metrics.selectors import counter_totals, ledger_totals

    bound = one_job_bound(alice_client)
    feature_budget(limit_usd=bound * Decimal("1.5"))
    in_flight = submit(alice_client, feature=FEATURE, max_tokens=16)
    # Another copy holds the room as a call in flight would.
    assert isinstance(budget_reserve(job=in_flight, attempt=1), Reservation)
    job = submit(alice_client, feature=FEATURE, max_tokens=16)
    queue = django_rq.get_queue(LLM_QUEUE)
    queue.remove(job.rq_job_id)

    assert job_run(job_id=str(job.id), rq_job_id=job.rq_job_id) == "budget_wait"

    job.refresh_from_db()
    assert job.status == "queued" and job.attempts == 0
    assert job.rq_job_id in queue.scheduled_job_registry.get_job_ids()
    assert counter_totals().differences(ledger_totals()) == []


def test_an_attempt_that_reserved_nothing_reads_no_reservation_and_one_that_did_settles_it(
    alice_client, fake_provider
):
    """The ledger row of an attempt whose claim took no reservation (no budget applied) does
    not look for one; once a budget applies, the attempt's reservation is settled to the row's
    cost, in the same transaction."""
    queue = django_rq.get_queue(LLM_QUEUE)

    def run(job: LlmJob) -> list[str]:
        queue.remove(job.rq_job_id)
        with CaptureQueriesContext(connection) as queries:
            assert job_run(job_id=str(job.id), rq_job_id=job.rq_job_id) == "success"
        return [q["sql"] for q in queries.captured_queries]

    free = run(submit(alice_client, feature="no-budget-here", max_tokens=16))
    assert not [sql for sql in free if "ledger_budgetreservation" in sql]
    feature_budget(limit_usd=Decimal("5"))
    job = submit(alice_client, feature=FEATURE, max_tokens=16)
    held = run(job)
    assert [sql for sql in held if sql.startswith("SELECT") and "ledger_budgetreservation" in sql]
    entry = CostEntry.objects.get(job=job)
    reservation = BudgetReservation.objects.get(job=job)
    assert reservation.settled_at is not None and reservation.settled_usd == entry.cost_usd
    window = BudgetWindow.objects.get()
    assert window.spent_usd == entry.cost_usd > 0
