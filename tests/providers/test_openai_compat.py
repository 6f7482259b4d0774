"""An OpenAI-compatible provider beside Anthropic (issue 23): jobs for its models run on it, on
the real stack: real MariaDB, real Redis, real RQ workers, the fake provider's OpenAI-compatible
API over HTTP, the official openai SDK. No mocks."""

import time
from decimal import Decimal
from typing import Any

import pytest
from prometheus_client import generate_latest

from dlq.models import FailureRecord
from jobs.models import LlmJob, ProviderBreaker
from jobs.reconciler import requeue_waiting_jobs
from ledger.models import CostEntry
from ledger.price_table import model_price_set
from metrics.collector import llm_registry
from providers.services import provider_save
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

MODEL = "gpt-4o-mini"
SELF_HOSTED = "llama3.1:8b"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
def local_openai(fake_provider: Any) -> str:
    """The provider ``local-openai`` at the fake provider's OpenAI-compatible API, with a priced
    model and a free self-hosted one."""
    provider_save(name="local-openai", kind="openai", base_url=f"{fake_provider.url}/openai/v1")
    model_price_set(
        model=MODEL,
        provider="local-openai",
        input_per_mtok=Decimal("0.15"),
        output_per_mtok=Decimal("0.60"),
        cache_read_per_mtok=Decimal("0.075"),
        max_output_tokens=16_384,
    )
    model_price_set(
        model=SELF_HOSTED,
        provider="local-openai",
        input_per_mtok=Decimal(0),
        output_per_mtok=Decimal(0),
    )
    return "local-openai"


def _output(client: Any, job: LlmJob) -> dict[str, Any]:
    response = client.get(f"/api/v1/jobs/{job.id}/")
    assert response.status_code == 200
    return dict(response.json()["output"])


def _billed(fake_provider: Any) -> list[dict[str, Any]]:
    return list(fake_provider.http.get("/_fake/billing").json()["calls"])


def test_a_chat_job_with_tools_streams_on_the_openai_compatible_provider(
    alice_client, workers, fake_provider, local_openai
):
    job = submit(
        alice_client,
        model=MODEL,
        system="Answer briefly.",
        tools=[WEATHER],
        messages=[{"role": "user", "content": "Use get_weather for Paris"}],
    )
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed", job.error_message
    output = _output(alice_client, job)
    assert output["stop_reason"] == "tool_use"
    text, call = output["content"]
    assert text == {"type": "text", "text": "I will call get_weather."}
    assert call["type"] == "tool_use" and call["name"] == "get_weather"
    assert call["input"] == {"city": "fake"} and call["id"].startswith("call_")
    assert output["text"] == "I will call get_weather."
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.provider == "local-openai" and entry.outcome == "success"
    assert entry.input_tokens > 0 and entry.output_tokens > 0
    expected = (entry.input_tokens * Decimal("0.15") + entry.output_tokens * Decimal("0.60")) / (
        Decimal(1_000_000)
    )
    assert entry.cost_usd == expected.quantize(Decimal("0.000001"))
    (billed,) = _billed(fake_provider)
    assert billed["idempotency_key"] == str(job.id)

    # The next turn carries the tool call and its result: translated, answered from the result.
    follow = submit(
        alice_client,
        model=MODEL,
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Use get_weather for Paris"},
            {"role": "assistant", "content": output["content"]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call["id"], "content": "sunny, 21 C"}
                ],
            },
        ],
    )
    workers.drain()
    follow.refresh_from_db()
    assert follow.status == "completed", follow.error_message
    answer = _output(alice_client, follow)
    assert answer["stop_reason"] == "end_turn"
    assert answer["text"] == "Results: sunny, 21 C"


def test_a_self_hosted_model_at_zero_prices_is_still_metered(
    alice_client, workers, fake_provider, local_openai
):
    job = submit(alice_client, model=SELF_HOSTED, messages=[{"role": "user", "content": "hi"}])
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed"
    assert _output(alice_client, job)["text"].startswith("Fake reply to: hi")
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.cost_usd == 0 and entry.provider == "local-openai"
    assert entry.input_tokens > 0 and entry.output_tokens > 0 and entry.latency_ms is not None
    # Its metrics carry its provider's label.
    exposition = generate_latest(llm_registry()).decode()
    attempts = [line for line in exposition.splitlines() if line.startswith("llm_attempts_total{")]
    assert any(f'model="{SELF_HOSTED}"' in line and 'provider="local-openai"' in line
               for line in attempts)  # fmt: skip


def test_insufficient_quota_holds_only_that_providers_jobs(
    alice_client, workers, fake_provider, local_openai, settings
):
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0
    # Only the OpenAI-compatible API draws this fault: the Messages API keeps answering.
    fake_provider.faults({"insufficient_quota": 1.0})
    openai_jobs = [submit(alice_client, model=MODEL) for _ in range(5)]
    claude_jobs = [submit(alice_client) for _ in range(3)]
    workers.drain()

    (failure,) = FailureRecord.objects.all()
    assert failure.reason_code == "insufficient_quota" and failure.severity == "CRITICAL"
    assert failure.job.model == MODEL and failure.http_status == 429
    breaker = ProviderBreaker.objects.get(provider="local-openai")
    assert breaker.is_open and breaker.reason_code == "insufficient_quota"
    assert not ProviderBreaker.objects.filter(provider="anthropic", state="open").exists()
    waiting = LlmJob.objects.filter(id__in=[j.id for j in openai_jobs], status="queued")
    assert waiting.count() == 4 and all(job.attempts == 0 for job in waiting)
    claude = LlmJob.objects.filter(id__in=[j.id for j in claude_jobs])
    assert {job.status for job in claude} == {"completed"}

    # The reconciler leaves the held jobs alone (no probe due) and still serves the others.
    later = submit(alice_client)
    workers.queue.empty()  # its RQ job lost: only the reconciler can put it back
    report = requeue_waiting_jobs(grace_seconds=0)
    assert report.held_by_breaker and report.requeued_lost == 1
    workers.drain()
    later.refresh_from_db()
    assert later.status == "completed"
    assert LlmJob.objects.filter(id__in=[j.id for j in openai_jobs], status="queued").count() == 4


def test_a_hung_self_hosted_model_is_abandoned_within_the_idle_bound(
    alice_client, workers, fake_provider, local_openai, settings
):
    settings.LLM_STREAM_IDLE_SECONDS = 2.0
    fake_provider.faults({"stall": 1.0})
    job = submit(
        alice_client,
        model=SELF_HOSTED,
        messages=[{"role": "user", "content": "Write. fake_output_tokens=400"}],
    )
    started = time.monotonic()
    workers.drain()
    elapsed = time.monotonic() - started
    job.refresh_from_db()
    # Two attempts (the read-timeout class retries once), each cut at the idle bound.
    assert job.status == "failed" and job.attempts == 2 and job.error_code == "read_timeout"
    assert "Stream stalled" in job.error_message
    assert elapsed < 2 * (2.0 + 3.0) + 5
    entries = list(CostEntry.objects.filter(job=job).order_by("attempt"))
    assert [e.outcome for e in entries] == ["unknown_outcome", "unknown_outcome"]
    assert all(e.latency_ms is not None and 1900 <= e.latency_ms < 4500 for e in entries)
    assert [c["how"] for c in _billed(fake_provider)] == ["stalled", "stalled"]


def test_a_rate_limit_429_is_retried_and_its_headers_feed_that_providers_limiter(
    alice_client, workers, fake_provider, local_openai
):
    job = submit(alice_client, model=MODEL)
    fake_provider.http.post(
        "/_fake/faults", json={"next": ["429", "ok"], "key": str(job.id)}
    ).raise_for_status()
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    first, second = CostEntry.objects.filter(job=job).order_by("attempt")
    assert first.reason_code == "rate_limited" and first.http_status == 429
    assert first.retry_delay_seconds is not None and first.retry_delay_seconds >= 1.0
    # The limiter learned the provider's requests limit from its x-ratelimit-* headers, under
    # this provider's name, not Anthropic's.
    keys = [key.decode() for key in workers.queue.connection.keys("*local-openai*")]
    assert keys, "no limiter key of the local-openai provider"
    assert not [key for key in keys if "anthropic" in key]


@pytest.mark.parametrize("fault,reason", [("400", "invalid_request"), ("404", "not_found")])
def test_a_request_error_is_fatal_for_the_job_alone(
    alice_client, workers, fake_provider, local_openai, fault, reason
):
    fake_provider.faults({fault: 1.0})
    job = submit(alice_client, model=MODEL)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 1 and job.error_code == reason
    assert not ProviderBreaker.objects.filter(state="open").exists()


def test_a_body_the_api_has_no_form_for_fails_without_a_call(
    alice_client, workers, fake_provider, local_openai
):
    job = submit(
        alice_client,
        model=MODEL,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.error_code == "invalid_request"
    assert "thinking" in job.error_message
    assert fake_provider.stats()["requests"] == 0
