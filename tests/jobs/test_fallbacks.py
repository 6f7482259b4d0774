"""Fallbacks (issue 23): a feature's jobs move to its next model when their model's provider is
out. On the real stack: MariaDB, Redis, real RQ workers, the fake provider's Messages and
OpenAI-compatible APIs over HTTP. No mocks."""

from decimal import Decimal
from typing import Any

import pytest

from dlq.models import FailureRecord
from features.services import feature_policy_update
from jobs.models import LlmJob, ProviderBreaker
from ledger.models import CostEntry
from ledger.price_table import model_price_set
from ledger.selectors import price_for_model
from ledger.services import job_upper_bound_cost
from providers.services import provider_save
from tests.conftest import submit
from tests.ratelimits.conftest import reserve

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.fixture
def compressed_window(settings: Any) -> None:
    """The limiter's window compressed to 2 s, as in its own tests (tests/ratelimits/)."""
    settings.LLM_RATE_LIMIT_WINDOW_SECONDS = 2.0
    settings.LLM_RATE_LIMIT_MARGIN_SECONDS = 0.0
    settings.LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS = 0.0
    settings.LLM_RATE_LIMIT_SLOW_START = False


PRIMARY = "claude-sonnet-4-6"
FALLBACK = "claude-haiku-4-5"
OPENAI_MODEL = "gpt-4o-mini"
FEATURE = "email-classify"


@pytest.fixture
def local_openai(fake_provider: Any) -> str:
    """The provider ``local-openai`` at the fake provider's OpenAI-compatible API."""
    provider_save(name="local-openai", kind="openai", base_url=f"{fake_provider.url}/openai/v1")
    model_price_set(
        model=OPENAI_MODEL,
        provider="local-openai",
        input_per_mtok=Decimal("0.15"),
        output_per_mtok=Decimal("0.60"),
        max_output_tokens=16_384,
    )
    return "local-openai"


def _script(fake_provider: Any, job: LlmJob, steps: list[str]) -> None:
    fake_provider.http.post(
        "/_fake/faults", json={"next": steps, "key": str(job.id)}
    ).raise_for_status()


def _job_body(client: Any, job: LlmJob) -> dict[str, Any]:
    response = client.get(f"/api/v1/jobs/{job.id}/")
    assert response.status_code == 200
    return dict(response.json())


def test_a_529_storm_on_the_primary_moves_the_features_jobs_to_its_fallback(
    alice_client, workers, fake_provider
):
    feature_policy_update(feature=FEATURE, fallback_models=[FALLBACK])
    jobs = [submit(alice_client) for _ in range(6)]
    for job in jobs:
        # The primary answers 529 to each job's first calls; the storm outlasts its schedule.
        _script(fake_provider, job, ["529", "529"])
    workers.drain()

    primary, fallback = price_for_model(model=PRIMARY), price_for_model(model=FALLBACK)
    for job in jobs:
        job.refresh_from_db()
        assert job.status == "completed", job.error_message
        # LLM_FALLBACK_AFTER_ATTEMPTS (2) failures on the primary, then the fallback answered.
        assert job.attempts == 3 and (job.model, job.served_by) == (PRIMARY, FALLBACK)
        entries = list(CostEntry.objects.filter(job=job).order_by("attempt"))
        assert [(e.model, e.outcome, e.reason_code) for e in entries] == [
            (PRIMARY, "error_response", "overloaded"),
            (PRIMARY, "error_response", "overloaded"),
            (FALLBACK, "success", ""),
        ]
        # Each attempt priced at the model that ran: the success at the fallback's rates.
        assert [e.price_id for e in entries] == [primary.id, primary.id, fallback.id]
        success = entries[-1]
        expected = (
            success.input_tokens * fallback.input_per_mtok
            + success.output_tokens * fallback.output_per_mtok
        ) / Decimal(1_000_000)
        assert success.cost_usd == expected.quantize(Decimal("0.000001"))
        assert job.cost_usd == success.cost_usd
        # The move itself waited for no schedule: the second failure retried at once.
        assert entries[1].retry_delay_seconds == 0.0
        body = _job_body(alice_client, job)
        assert (body["model"], body["served_by"]) == (PRIMARY, FALLBACK)
    assert not FailureRecord.objects.exists()


def test_one_transient_failure_retries_on_the_same_model(alice_client, workers, fake_provider):
    feature_policy_update(feature=FEATURE, fallback_models=[FALLBACK])
    job = submit(alice_client)
    _script(fake_provider, job, ["529"])
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    assert job.served_by == PRIMARY
    assert list(CostEntry.objects.filter(job=job).values_list("model", flat=True)) == [
        PRIMARY,
        PRIMARY,
    ]


def test_a_fatal_error_of_the_request_never_moves_the_job(alice_client, workers, fake_provider):
    feature_policy_update(feature=FEATURE, fallback_models=[FALLBACK])
    job = submit(alice_client)
    _script(fake_provider, job, ["400"])
    workers.drain()
    job.refresh_from_db()
    # A 400 would fail on any model: dead-lettered where it ran, no call on the fallback.
    assert (job.status, job.error_code, job.attempts) == ("failed", "invalid_request", 1)
    assert job.run_model == PRIMARY and job.served_by == ""
    assert fake_provider.stats()["requests"] == 1
    assert FailureRecord.objects.get(job=job).reason_code == "invalid_request"


def test_a_feature_without_a_policy_keeps_its_retry_table(alice_client, workers, fake_provider):
    job = submit(alice_client)
    _script(fake_provider, job, ["529", "529", "529", "529"])
    workers.drain()
    job.refresh_from_db()
    # The overloaded class's three retries, then the DLQ: nowhere to move to.
    assert (job.status, job.error_code, job.attempts) == ("failed", "overloaded", 4)
    assert set(CostEntry.objects.filter(job=job).values_list("model", flat=True)) == {PRIMARY}


def test_insufficient_quota_moves_that_providers_jobs_to_claude_and_holds_none(
    alice_client, workers, fake_provider, local_openai, settings
):
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0
    feature_policy_update(feature=FEATURE, fallback_models=[PRIMARY])
    # Only the OpenAI-compatible API draws this fault: the Messages API keeps answering.
    fake_provider.faults({"insufficient_quota": 1.0})
    jobs = [submit(alice_client, model=OPENAI_MODEL) for _ in range(4)]
    workers.drain()

    breaker = ProviderBreaker.objects.get(provider="local-openai")
    assert breaker.is_open and breaker.reason_code == "insufficient_quota"
    for job in LlmJob.objects.filter(id__in=[j.id for j in jobs]):
        assert job.status == "completed" and job.served_by == PRIMARY, job.error_message
    # The job whose call met the quota is the only one that called the OpenAI API; the others
    # moved at the open breaker with no attempt there.
    openai_rows = CostEntry.objects.filter(model=OPENAI_MODEL)
    assert openai_rows.count() == 1
    assert openai_rows.get().reason_code == "insufficient_quota"
    assert CostEntry.objects.filter(model=PRIMARY, outcome="success").count() == 4
    # No dead letter: the account-wide failure paged through the breaker, the job moved on.
    assert not FailureRecord.objects.exists()


def test_an_embedding_job_never_moves_to_a_chat_model(
    alice_client, workers, fake_provider, local_openai
):
    model_price_set(
        model="text-embedding-3-small",
        provider="local-openai",
        kind="embedding",
        input_per_mtok=Decimal("0.02"),
        output_per_mtok=Decimal(0),
    )
    feature_policy_update(feature=FEATURE, fallback_models=[PRIMARY])
    fake_provider.faults({"insufficient_quota": 1.0})
    response = alice_client.post(
        "/api/v1/embeddings/",
        {"feature": FEATURE, "model": "text-embedding-3-small", "input": ["a", "b"]},
        format="json",
    )
    assert response.status_code == 202, response.content
    workers.drain()
    job = LlmJob.objects.get(id=response.json()["id"])
    assert (job.status, job.error_code) == ("failed", "insufficient_quota")
    assert job.run_model == "text-embedding-3-small"


def test_a_job_the_limiter_would_hold_too_long_moves_with_no_attempt_used(
    alice_client, workers, fake_provider, settings, compressed_window
):
    settings.LLM_RATE_LIMITS = {PRIMARY: {"rpm": 2}}
    settings.LLM_FALLBACK_AFTER_WAIT_SECONDS = 0.5
    feature_policy_update(feature=FEATURE, fallback_models=[FALLBACK])
    reserve(rpm=2, model=PRIMARY)
    reserve(rpm=2, model=PRIMARY)  # the primary's window is full for 2 s: past the wait bound
    job = submit(alice_client)
    workers.work_once()
    job.refresh_from_db()
    # Moved before any call on the primary (no attempt used there), and run at once on the
    # fallback: one attempt, one ledger row, at the fallback, well inside the primary's window.
    assert job.status == "completed" and job.attempts == 1 and job.served_by == FALLBACK
    assert list(CostEntry.objects.filter(job=job).values_list("model", flat=True)) == [FALLBACK]
    assert fake_provider.stats()["requests"] == 1


def test_a_short_limiter_hold_stays_on_its_model(
    alice_client, workers, fake_provider, settings, compressed_window
):
    settings.LLM_RATE_LIMITS = {PRIMARY: {"rpm": 2}}
    settings.LLM_FALLBACK_AFTER_WAIT_SECONDS = 30
    feature_policy_update(feature=FEATURE, fallback_models=[FALLBACK])
    reserve(rpm=2, model=PRIMARY)
    reserve(rpm=2, model=PRIMARY)
    job = submit(alice_client)
    workers.work_once()
    job.refresh_from_db()
    assert (job.status, job.run_model) == ("queued", PRIMARY)
    assert job.limiter_wait_since is not None  # the wait on this model is counted from here


def test_budgets_reserve_at_the_price_of_the_model_about_to_run(alice_client, fake_provider):
    feature_policy_update(feature=FEATURE, fallback_models=["claude-opus-4-6"])
    job = submit(alice_client)
    on_primary = job_upper_bound_cost(job=job)
    job.current_model = "claude-opus-4-6"
    on_fallback = job_upper_bound_cost(job=job)
    opus, sonnet = price_for_model(model="claude-opus-4-6"), price_for_model(model=PRIMARY)
    assert float(on_fallback / on_primary) == pytest.approx(
        float(opus.output_per_mtok / sonnet.output_per_mtok), rel=0.01
    )


def test_a_requeue_from_the_dlq_starts_again_on_the_jobs_own_model(
    alice_client, workers, fake_provider
):
    feature_policy_update(feature=FEATURE, fallback_models=[FALLBACK])
    job = submit(alice_client)
    _script(fake_provider, job, ["529", "529", "400"])
    workers.drain()
    job.refresh_from_db()
    assert (job.status, job.run_model, job.error_code) == ("failed", FALLBACK, "invalid_request")
    record = FailureRecord.objects.get(job=job)
    assert record.request_snapshot["model"] == FALLBACK  # the request as it was sent
    from dlq.services import failure_requeue

    assert failure_requeue(record=record)
    job.refresh_from_db()
    assert (job.status, job.run_model, job.model_failures) == ("queued", PRIMARY, 0)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.served_by == PRIMARY


def test_the_cost_report_groups_by_the_model_that_ran(alice_client, workers, fake_provider):
    feature_policy_update(feature=FEATURE, fallback_models=[FALLBACK])
    job = submit(alice_client)
    _script(fake_provider, job, ["529", "529"])
    workers.drain()
    response = alice_client.get("/api/v1/costs/", {"group_by": "model"})
    assert response.status_code == 200, response.content
    groups = {row["key"]: row for row in response.json()["rows"]}
    assert set(groups) == {PRIMARY, FALLBACK}
    job.refresh_from_db()
    assert Decimal(groups[FALLBACK]["cost_usd"]) == job.cost_usd
