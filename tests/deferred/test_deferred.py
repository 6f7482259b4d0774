"""Deferred jobs at half price through the Message Batches API (issue 25), on the real stack:
MariaDB, Redis, real RQ workers for what runs in real time, the fake provider's Message Batches
endpoints over HTTP through the anthropic SDK, the deferred loop's passes in process."""

import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from deferred.models import ProviderBatch, ProviderBatchItem
from deferred.services import deferred_pass
from features.services import feature_policy_update
from jobs.models import LlmJob
from ledger.models import Budget, BudgetReservation, CostEntry
from ledger.pricing import attempt_cost
from ledger.selectors import price_for_model
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

MODEL = "claude-haiku-4-5"


@pytest.fixture
def deferred_settings(settings: Any) -> Any:
    settings.LLM_DEFERRED_FLUSH_SECONDS = 0
    settings.LLM_DEFERRED_MAX_BATCH = 10_000
    return settings


def _batch_faults(fake_provider: Any, **faults: Any) -> None:
    fake_provider.http.post("/_fake/faults", json={"faults": {}, **faults}).raise_for_status()


def _run_until_settled(workers: Any, *, jobs: list[LlmJob], seconds: float = 120) -> None:
    """Loop passes (and real-time workers) until every job is final."""
    ids = [job.id for job in jobs]
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        deferred_pass()
        workers.drain()
        if not LlmJob.objects.filter(id__in=ids).exclude(status__in=LlmJob.FINAL_STATUSES).exists():
            return
        time.sleep(0.2)
    raise AssertionError("jobs not final in time")


def _bill(fake_provider: Any) -> dict[str, Any]:
    return dict(fake_provider.stats()["billed"])


@pytest.mark.slow  # 2,000 jobs: three minutes of a worker, started first (tests/parallel.py)
@pytest.mark.long  # 45 s of CPU in the test's own process: make test-long
def test_deferred_jobs_complete_through_provider_batches_at_half_price(
    alice_client, workers, fake_provider, deferred_settings
):
    deferred_settings.LLM_DEFERRED_MAX_BATCH = 500
    _batch_faults(fake_provider, batch_processing_seconds=0.5)
    # A batch of 2,000 summaries asking for deferred work: each of its jobs is deferred.
    response = alice_client.post(
        "/api/v1/batches/",
        {
            "feature": "nightly-summary",
            "model": MODEL,
            "mode": "deferred",
            "items": [
                {"messages": [{"role": "user", "content": f"Summarise ticket {i}"}],
                 "max_tokens": 200}
                for i in range(2000)
            ],
        },
        format="json",
    )  # fmt: skip
    assert response.status_code == 202, response.content
    jobs = list(LlmJob.objects.all())
    assert len(jobs) == 2000 and {job.mode for job in jobs} == {"deferred"}
    assert workers.queue.count == 0  # never pushed on the llm queue
    # 35 s alone on 2 cores, 78 s in the parallel suite; 2,000 jobs get room for a loaded host.
    _run_until_settled(workers, jobs=jobs, seconds=240)

    assert LlmJob.objects.filter(status="completed").count() == 2000
    # A handful of provider batches (at most LLM_DEFERRED_MAX_BATCH jobs each), every item in one.
    assert ProviderBatch.objects.count() == 4
    assert set(ProviderBatch.objects.values_list("status", flat=True)) == {"booked"}
    assert fake_provider.stats()["requests"] == 0  # no real-time call
    entries = CostEntry.objects.filter(job__in=jobs)
    assert entries.count() == 2000 and not entries.exclude(is_batch=True).exists()
    ledger = sum(entries.values_list("cost_usd", flat=True), Decimal(0))
    bill = Decimal(str(_bill(fake_provider)["batch_cost_usd"]))
    # Each row rounds half-up to the micro-dollar.
    assert abs(ledger - bill) <= Decimal("0.0000005") * 2000
    price = price_for_model(model=MODEL)
    one = entries.first()
    usage = {"input_tokens": one.input_tokens, "output_tokens": one.output_tokens}
    assert one.cost_usd == attempt_cost(price, usage, batch=True)
    assert one.cost_usd * 2 == pytest.approx(attempt_cost(price, usage), abs=Decimal("0.000001"))
    assert one.batch_saved_usd == attempt_cost(price, usage) - one.cost_usd
    body = alice_client.get(f"/api/v1/jobs/{jobs[0].id}/").json()
    assert body["mode"] == "deferred" and body["provider_batch"].startswith("msgbatch_")
    # The cost report shows, per feature, what deferred work saved against the standard price.
    report = alice_client.get("/api/v1/costs/", {"group_by": "feature"}).json()
    (row,) = report["rows"]
    saved = sum(entries.values_list("batch_saved_usd", flat=True), Decimal(0))
    assert row["key"] == "nightly-summary" and Decimal(row["batch_saved_usd"]) == saved
    assert saved == pytest.approx(ledger, rel=Decimal("0.01"))  # half price: saved = paid
    from jobs.events import event_for

    event = event_for(LlmJob.objects.get(id=jobs[0].id))["job"]
    assert event["mode"] == "deferred" and event["provider_batch"] == body["provider_batch"]


def test_errored_items_retry_in_a_later_batch_and_expired_ones_run_in_real_time(
    alice_client, workers, fake_provider, deferred_settings
):
    _batch_faults(
        fake_provider,
        batch_processing_seconds=0.2,
        batch_errored_rate=0.3,
        batch_expired_rate=0.2,
    )
    jobs = [submit(alice_client, model=MODEL, mode="deferred") for _ in range(40)]
    deferred_pass()  # the first batch
    time.sleep(0.5)
    # Later batches go through.
    _batch_faults(
        fake_provider, batch_processing_seconds=0.2, batch_errored_rate=0, batch_expired_rate=0
    )
    _run_until_settled(workers, jobs=jobs)

    assert LlmJob.objects.filter(id__in=[j.id for j in jobs], status="completed").count() == 40
    first = ProviderBatch.objects.order_by("created_at").first()
    results = dict(
        ProviderBatchItem.objects.filter(batch=first)
        .values_list("result_type")
        .annotate(n=__import__("django.db.models", fromlist=["Count"]).Count("id"))
    )
    assert results.get("errored", 0) > 0 and results.get("expired", 0) > 0
    errored = ProviderBatchItem.objects.filter(batch=first, result_type="errored")
    for item in errored:
        rows = list(CostEntry.objects.filter(job=item.job).order_by("attempt"))
        # The transient error retried in a later provider batch, at the batch price.
        assert rows[0].outcome == "error_response" and rows[0].cost_usd == 0
        assert rows[-1].outcome == "success" and rows[-1].is_batch
    expired = ProviderBatchItem.objects.filter(batch=first, result_type="expired")
    for item in expired:
        job = LlmJob.objects.get(id=item.job_id)
        rows = list(CostEntry.objects.filter(job=job).order_by("attempt"))
        assert [r.outcome for r in rows] == ["expired", "success"]
        # Run in real time at the standard price.
        assert not rows[-1].is_batch and job.mode == "realtime"
    assert fake_provider.stats()["requests"] == expired.count()


def test_a_late_batch_sends_near_deadline_jobs_to_real_time_and_books_late_results_superseded(
    alice_client, workers, fake_provider, deferred_settings
):
    deferred_settings.LLM_DEFERRED_FALLBACK_MARGIN_SECONDS = 600
    _batch_faults(fake_provider, batch_processing_seconds=4)
    relaxed = [submit(alice_client, model=MODEL, mode="deferred", deadline_seconds=86_400)
               for _ in range(3)]  # fmt: skip
    urgent = [submit(alice_client, model=MODEL, mode="deferred") for _ in range(3)]
    deferred_pass()  # every job goes into one provider batch
    assert ProviderBatch.objects.count() == 1
    # The urgent ones' deadline comes close while the batch still runs.
    LlmJob.objects.filter(id__in=[j.id for j in urgent]).update(
        deadline=timezone.now() + timedelta(seconds=700)
    )
    deferred_pass()
    workers.drain()
    for job in LlmJob.objects.filter(id__in=[j.id for j in urgent]):
        assert job.status == "completed" and job.mode == "realtime"
        assert job.completed_at < job.deadline
    _run_until_settled(workers, jobs=relaxed + urgent, seconds=30)
    time.sleep(4.5)
    deferred_pass()  # the batch ends: every result is booked, the urgent ones superseded
    batch = ProviderBatch.objects.get()
    assert batch.status == "booked"
    superseded = CostEntry.objects.filter(is_superseded=True)
    assert set(superseded.values_list("job_id", flat=True)) == {j.id for j in urgent}
    assert all(row.is_batch and row.cost_usd > 0 for row in superseded)
    # The ledger covers both bills: the real-time calls and the whole batch.
    ledger = sum(CostEntry.objects.values_list("cost_usd", flat=True), Decimal(0))
    bill = Decimal(str(_bill(fake_provider)["cost_usd"]))
    assert abs(ledger - bill) <= Decimal("0.000001") * 9
    for job in LlmJob.objects.filter(id__in=[j.id for j in urgent]):
        total = sum(CostEntry.objects.filter(job=job).values_list("cost_usd", flat=True))
        assert job.cost_usd == total


def test_a_batch_whose_jobs_all_moved_is_cancelled(
    alice_client, workers, fake_provider, deferred_settings
):
    _batch_faults(fake_provider, batch_processing_seconds=30)
    jobs = [submit(alice_client, model=MODEL, mode="deferred") for _ in range(2)]
    deferred_pass()
    batch = ProviderBatch.objects.get()
    for job in jobs:
        response = alice_client.post(f"/api/v1/jobs/{job.id}/cancel/")
        assert response.status_code == 200, response.content
        assert response.json()["status"] == "cancelled"
    deferred_pass()
    batch.refresh_from_db()
    assert batch.cancel_requested_at is not None
    deferred_pass()  # cancelled at the provider: its items come back canceled, booked at $0
    batch.refresh_from_db()
    assert batch.status == "booked"
    rows = CostEntry.objects.filter(job__in=jobs)
    assert rows.count() == 2 and {r.cost_usd for r in rows} == {Decimal(0)}
    assert all(r.is_superseded for r in rows)


def test_budgets_reserve_deferred_jobs_at_the_batch_price(
    alice_client, workers, fake_provider, deferred_settings
):
    Budget.objects.create(scope="feature", feature="email-classify", limit_usd=Decimal("10"))
    _batch_faults(fake_provider, batch_processing_seconds=30)
    deferred = submit(alice_client, model=MODEL, mode="deferred")
    deferred_pass()
    held = BudgetReservation.objects.get(job=deferred)
    from ledger.services import job_upper_bound_cost

    deferred.refresh_from_db()
    assert held.amount_usd == pytest.approx(job_upper_bound_cost(job=deferred) / 2, abs=1e-6)
    assert held.claimed_at is not None and held.settled_at is None


def test_a_deferred_job_of_a_provider_without_a_batch_api_runs_in_real_time(
    alice_client, workers, fake_provider, deferred_settings
):
    from ledger.price_table import model_price_set
    from providers.services import provider_save

    provider_save(name="local-openai", kind="openai", base_url=f"{fake_provider.url}/openai/v1")
    model_price_set(model="gpt-4o-mini", provider="local-openai", input_per_mtok=Decimal("0.15"),
                    output_per_mtok=Decimal("0.60"), max_output_tokens=16_384)  # fmt: skip
    job = submit(alice_client, model="gpt-4o-mini", mode="deferred")
    assert job.mode == "realtime"
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed"


def test_a_feature_policy_makes_its_jobs_deferred(
    alice_client, workers, fake_provider, deferred_settings
):
    feature_policy_update(feature="nightly-summary", fallback_models=[], mode="deferred")
    job = submit(alice_client, model=MODEL, feature="nightly-summary")
    assert job.mode == "deferred"
    explicit = submit(alice_client, model=MODEL, feature="nightly-summary", mode="realtime")
    assert explicit.mode == "realtime"
    bad = alice_client.post(
        "/api/v1/jobs/",
        {"feature": "x", "model": MODEL, "mode": "later", "max_tokens": 10,
         "messages": [{"role": "user", "content": "hi"}]},
        format="json",
    )  # fmt: skip
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_mode"


def test_a_feature_deferred_with_an_hour_deadline_halves_its_cost_and_meets_it(
    workers, fake_provider, deferred_settings, alice_client
):
    from rest_framework.test import APIClient

    from keys.testing import api_key_for
    from tests.conftest import make_user

    staff = APIClient()
    staff.credentials(
        HTTP_AUTHORIZATION="Bearer "
        + api_key_for(make_user("ops", "change_featurepolicy", is_staff=True))
    )
    response = staff.put(
        "/api/v1/features/nightly-summary/",
        {"mode": "deferred", "deadline_seconds": 3600},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert (response.json()["mode"], response.json()["deadline_seconds"]) == ("deferred", 3600)
    _batch_faults(fake_provider, batch_processing_seconds=0.5)
    before = timezone.now()
    jobs = [submit(alice_client, model=MODEL, feature="nightly-summary") for _ in range(5)]
    for job in jobs:
        assert job.mode == "deferred"
        assert timedelta(seconds=3599) <= job.deadline - before <= timedelta(seconds=3601)
    _run_until_settled(workers, jobs=jobs, seconds=60)
    report = alice_client.get("/api/v1/costs/", {"group_by": "feature"}).json()
    (row,) = report["rows"]
    # Half price: what it saved equals what it paid.
    assert Decimal(row["batch_saved_usd"]) == pytest.approx(Decimal(row["cost_usd"]), abs=1e-5)
    for job in LlmJob.objects.filter(id__in=[j.id for j in jobs]):
        assert job.status == "completed" and job.completed_at <= job.deadline
    assert fake_provider.stats()["requests"] == 0


def test_a_deferred_job_whose_deadline_is_too_near_for_a_batch_runs_in_real_time_at_once(
    alice_client, workers, fake_provider, deferred_settings
):
    job = submit(alice_client, model=MODEL, mode="deferred", deadline_seconds=300)
    deferred_pass()
    job.refresh_from_db()
    assert job.mode == "realtime" and job.provider_batch_id is None
    assert not ProviderBatch.objects.exists()
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    assert not CostEntry.objects.get(job=job).is_batch


def test_a_deferred_job_past_its_deadline_is_never_sent(
    alice_client, workers, fake_provider, deferred_settings
):
    job = submit(alice_client, model=MODEL, mode="deferred", deadline_seconds=3600)
    LlmJob.objects.filter(id=job.id).update(deadline=timezone.now() - timedelta(seconds=1))
    deferred_pass()
    job.refresh_from_db()
    assert (job.status, job.error_code, job.attempts) == ("failed", "deadline_exceeded", 0)
    assert not ProviderBatch.objects.exists() and not CostEntry.objects.exists()


def test_a_create_of_unknown_outcome_is_never_repeated_and_its_attempts_are_booked_as_unknown(
    alice_client, workers, fake_provider, deferred_settings, settings
):
    """The provider drops the create's answer: the batch may exist, so it is not sent again;
    after five minutes its jobs' attempts are booked as of unknown outcome (at their upper
    bound, the bill may come) and retried in a new batch."""
    from tests.providers.test_message_batches import peer

    jobs = [submit(alice_client, model=MODEL, mode="deferred") for _ in range(3)]
    with peer("drop", settings) as server:
        deferred_pass()
        deferred_pass()
    assert len(server.keys) == 1  # one create, never repeated
    batch = ProviderBatch.objects.get()
    assert batch.status == "unsent"
    assert {j.status for j in LlmJob.objects.filter(id__in=[j.id for j in jobs])} == {"running"}
    ProviderBatch.objects.filter(id=batch.id).update(
        created_at=timezone.now() - timedelta(seconds=301)
    )
    settings.ANTHROPIC_BASE_URL = fake_provider.url
    _batch_faults(fake_provider, batch_processing_seconds=0.2)
    _run_until_settled(workers, jobs=jobs, seconds=60)
    for job in LlmJob.objects.filter(id__in=[j.id for j in jobs]):
        rows = list(CostEntry.objects.filter(job=job).order_by("attempt"))
        assert [r.outcome for r in rows] == ["unknown_outcome", "success"], rows
        assert rows[0].is_estimated and rows[0].cost_usd > 0 and rows[1].is_batch
        assert job.status == "completed"


def test_a_provider_outage_leaves_the_batch_waiting_and_the_next_pass_books_it(
    alice_client, workers, fake_provider, deferred_settings, settings
):
    _batch_faults(fake_provider, batch_processing_seconds=0.2)
    jobs = [submit(alice_client, model=MODEL, mode="deferred") for _ in range(3)]
    deferred_pass()
    time.sleep(0.5)
    closed = "http://127.0.0.1:9"  # nothing listens: every read fails before it is sent
    settings.ANTHROPIC_BASE_URL = closed
    report = deferred_pass()  # the poll fails; the pass goes on and says nothing was booked
    assert report.results_booked == 0
    assert ProviderBatch.objects.get().status == "in_progress"
    settings.ANTHROPIC_BASE_URL = fake_provider.url
    _run_until_settled(workers, jobs=jobs, seconds=30)
    assert CostEntry.objects.filter(is_batch=True, outcome="success").count() == 3


def test_a_pass_cut_off_while_booking_books_each_result_once_when_it_runs_again(
    alice_client, workers, fake_provider, deferred_settings
):
    _batch_faults(fake_provider, batch_processing_seconds=0.2)
    jobs = [submit(alice_client, model=MODEL, mode="deferred") for _ in range(4)]
    deferred_pass()
    time.sleep(0.5)
    batch = ProviderBatch.objects.get()
    first = ProviderBatchItem.objects.filter(batch=batch).order_by("id").first()
    # As if the loop died after booking one result: the batch ended, three items unbooked.
    from deferred.booking import book_one
    from providers.message_batches import batch_results

    ProviderBatch.objects.filter(id=batch.id).update(status="ended")
    for result in batch_results(provider_name="anthropic", batch_id=batch.provider_batch_id):
        if result.custom_id == str(first.job_id):
            assert book_one(batch, result) == 0
    assert CostEntry.objects.count() == 1
    deferred_pass()  # the next pass reads every result again and books the three others once
    assert CostEntry.objects.count() == 4
    assert ProviderBatchItem.objects.filter(booked_at__isnull=True).count() == 0
    assert LlmJob.objects.filter(id__in=[j.id for j in jobs], status="completed").count() == 4
    ledger = sum(CostEntry.objects.values_list("cost_usd", flat=True), Decimal(0))
    bill = Decimal(str(_bill(fake_provider)["batch_cost_usd"]))
    assert abs(ledger - bill) <= Decimal("0.000002")


def _booked_by_model() -> dict[str, list[int]]:
    booked: dict[str, list[int]] = {}
    for model, inp, out in CostEntry.objects.values_list("model", "input_tokens", "output_tokens"):
        totals = booked.setdefault(model, [0, 0])
        totals[0] += inp
        totals[1] += out
    return booked


def test_a_batch_result_of_a_job_that_fell_back_is_booked_at_the_model_the_batch_ran_on(
    alice_client, workers, fake_provider, deferred_settings
):
    """Issue 37, fault 1: a deferred job on haiku whose batch ran late moved to real time, fell
    back to opus after two 529s and completed there; its batch result, booked superseded after,
    is haiku's tokens at haiku's batch price, not opus's. Checked against the provider's own
    bill, model by model."""
    deferred_settings.LLM_DEFERRED_FALLBACK_MARGIN_SECONDS = 600
    deferred_settings.LLM_FALLBACK_AFTER_ATTEMPTS = 2
    feature_policy_update(feature="late-digest", fallback_models=["claude-opus-4-6"])
    _batch_faults(fake_provider, batch_processing_seconds=4)
    job = submit(alice_client, model=MODEL, mode="deferred", feature="late-digest")
    # A job that stays in the batch: a batch whose jobs all moved would be cancelled.
    relaxed = submit(alice_client, model=MODEL, mode="deferred", deadline_seconds=86_400)
    deferred_pass()  # both into one provider batch, on haiku
    assert ProviderBatch.objects.count() == 1
    LlmJob.objects.filter(id=job.id).update(deadline=timezone.now() + timedelta(seconds=700))
    fake_provider.http.post(
        "/_fake/faults", json={"next": ["529", "529", "ok"], "key": str(job.id)}
    ).raise_for_status()
    deferred_pass()  # the batch runs late for its deadline: real time, now
    _run_until_settled(workers, jobs=[job], seconds=60)
    job.refresh_from_db()
    assert (job.status, job.run_model) == ("completed", "claude-opus-4-6")
    time.sleep(4.5)
    _run_until_settled(workers, jobs=[job, relaxed], seconds=30)
    deferred_pass()  # the batch ends: its result is booked, superseded
    assert ProviderBatch.objects.get().status == "booked"
    superseded = CostEntry.objects.get(is_superseded=True)
    assert (superseded.model, superseded.is_batch) == (MODEL, True)
    assert superseded.job_id == job.id and superseded.cost_usd > 0
    assert superseded.price.model == MODEL

    billed = fake_provider.stats()["billed_by_model"]
    assert set(billed) == {MODEL, "claude-opus-4-6"}
    booked = _booked_by_model()
    for model, bill in billed.items():
        assert booked[model] == [bill["input_tokens"], bill["output_tokens"]], (model, booked)
        cost = sum(
            CostEntry.objects.filter(model=model).values_list("cost_usd", flat=True), Decimal(0)
        )
        assert cost == Decimal(bill["cost_usd"]), (model, cost, bill)
