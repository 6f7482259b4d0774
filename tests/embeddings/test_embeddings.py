"""Embedding jobs (issue 23) on the real stack: real MariaDB, Redis, RQ workers, the fake
provider's OpenAI-compatible Embeddings API over HTTP through the official openai SDK."""

import array
import math
from decimal import Decimal
from typing import Any

import pytest

from dlq.models import FailureRecord
from embeddings.models import EmbeddingChunk
from fake_provider.openai_embeddings import fake_vector
from jobs.models import LlmJob, ProviderBreaker
from ledger.models import CostEntry
from tests.conftest import submit
from tests.embeddings.conftest import EMBEDDING_MODEL, SELF_HOSTED_EMBEDDING

pytestmark = [pytest.mark.django_db(transaction=True)]

TEXTS = ["How do I reset my password?", "Refund policy", "Shipping to Norway", "hello"]


def _embed(client: Any, **overrides: Any) -> LlmJob:
    body = {"feature": "search-index", "model": EMBEDDING_MODEL, "input": TEXTS, **overrides}
    response = client.post("/api/v1/embeddings/", body, format="json")
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "queued"
    assert response.json()["status_url"] == f"/api/v1/embeddings/{response.json()['id']}/"
    return LlmJob.objects.get(id=response.json()["id"])


def _billed(fake_provider: Any) -> list[dict[str, Any]]:
    return list(fake_provider.http.get("/_fake/billing").json()["calls"])


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, abs_tol=1e-7) for x, y in zip(a, b, strict=True)
    )


def test_an_embeddings_job_returns_its_vectors_in_order_stored_as_float32(
    alice_client, workers, fake_provider, local_openai
):
    job = _embed(alice_client)
    assert job.kind == "embedding" and job.input == TEXTS and job.max_tokens == 0
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed", job.error_message

    body = alice_client.get(f"/api/v1/embeddings/{job.id}/").json()
    assert body["status"] == "completed" and body["kind"] == "embedding"
    output = body["output"]
    assert output["dimensions"] == 1536 and output["count"] == len(TEXTS)
    for text, vector in zip(TEXTS, output["embeddings"], strict=True):
        assert _close(vector, fake_vector(EMBEDDING_MODEL, text, 1536).tolist())
    # The job endpoint shows the same job, with the same vectors.
    same = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
    assert same["output"] == output and same["usage"] == body["usage"]
    # A list shows the shape only.
    listed = alice_client.get("/api/v1/jobs/").json()["results"][0]
    assert listed["output"] == {"embeddings": None, "dimensions": 1536, "count": len(TEXTS)}

    # Kept compactly: float32, 4 bytes a number, not JSON text.
    chunks = list(EmbeddingChunk.objects.filter(job=job))
    assert sum(len(bytes(c.vectors)) for c in chunks) == len(TEXTS) * 1536 * 4
    first = array.array("f")
    first.frombytes(bytes(chunks[0].vectors)[: 1536 * 4])
    assert first.tolist() == fake_vector(EMBEDDING_MODEL, TEXTS[0], 1536).tolist()

    # The ledger prices the input tokens, and equals the bill.
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.outcome == "success" and entry.provider == "local-openai"
    tokens = sum(max(1, -(-len(t) // 4)) for t in TEXTS)
    assert entry.input_tokens == tokens and entry.output_tokens == 0
    assert body["usage"]["input_tokens"] == tokens
    expected = (Decimal(tokens) * Decimal("0.02") / Decimal(1_000_000)).quantize(Decimal("1e-6"))
    assert entry.cost_usd == expected
    (billed,) = _billed(fake_provider)
    assert billed["idempotency_key"] == str(job.id)
    assert Decimal(billed["cost_usd"]).quantize(Decimal("1e-6")) == expected


def test_dimensions_and_a_self_hosted_model(alice_client, workers, fake_provider, local_openai):
    short = _embed(alice_client, dimensions=256, input="just one")
    free = _embed(alice_client, model=SELF_HOSTED_EMBEDDING)
    workers.drain()
    body = alice_client.get(f"/api/v1/embeddings/{short.id}/").json()
    assert body["output"]["dimensions"] == 256 and body["output"]["count"] == 1
    assert _close(body["output"]["embeddings"][0],
                  fake_vector(EMBEDDING_MODEL, "just one", 256).tolist())  # fmt: skip
    body = alice_client.get(f"/api/v1/embeddings/{free.id}/").json()
    assert body["status"] == "completed" and body["output"]["dimensions"] == 768
    (entry,) = CostEntry.objects.filter(job=free)
    assert entry.cost_usd == 0 and entry.input_tokens > 0


@pytest.mark.parametrize(
    "overrides,status,code",
    [
        ({"model": "claude-sonnet-4-6"}, 400, "invalid_model"),
        ({"model": "text-embeding-3-small"}, 400, "unknown_model"),
        ({"input": []}, 400, "invalid_input"),
        ({"input": ["ok", ""]}, 400, "invalid_input"),
        ({"input": ["x"] * 2049}, 400, "too_many_inputs"),
        ({"dimensions": 0}, 400, "invalid_dimensions"),
        ({"dimensions": "256"}, 400, "invalid_dimensions"),
        ({"feature": "Bad Feature"}, 400, "invalid_feature"),
        ({"messages": []}, 400, "unknown_field"),
        ({"metadata": []}, 400, "invalid_metadata"),
    ],
)
def test_bad_requests_answer_a_code_and_save_nothing(
    alice_client, local_openai, overrides, status, code
):
    body = {"feature": "search-index", "model": EMBEDDING_MODEL, "input": TEXTS, **overrides}
    response = alice_client.post("/api/v1/embeddings/", body, format="json")
    assert response.status_code == status, response.content
    assert response.json()["code"] == code
    assert not LlmJob.objects.exists()


def test_a_chat_job_on_an_embedding_model_and_an_embedding_of_a_chat_job(
    alice_client, local_openai
):
    response = alice_client.post(
        "/api/v1/jobs/",
        {
            "feature": "f",
            "model": EMBEDDING_MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 10,
        },
        format="json",
    )
    assert response.status_code == 400 and response.json()["code"] == "invalid_model"
    assert "POST /api/v1/embeddings/" in response.json()["message"]
    chat = submit(alice_client)
    response = alice_client.get(f"/api/v1/embeddings/{chat.id}/")
    assert response.status_code == 404
    assert response.json()["code"] == "embedding_not_found"
    # Without the trailing slash, as people type it.
    response = alice_client.post(
        "/api/v1/embeddings",
        {"feature": "f", "model": EMBEDDING_MODEL, "input": ["a"]},
        format="json",
    )
    assert response.status_code == 202, response.content


def test_an_idempotency_key_returns_the_first_embedding_job(alice_client, local_openai):
    headers = {"HTTP_IDEMPOTENCY_KEY": "embed-1"}
    body = {"feature": "search-index", "model": EMBEDDING_MODEL, "input": TEXTS}
    first = alice_client.post("/api/v1/embeddings/", body, format="json", **headers)
    again = alice_client.post("/api/v1/embeddings/", body, format="json", **headers)
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    other = alice_client.post(
        "/api/v1/embeddings/", {**body, "input": ["else"]}, format="json", **headers
    )
    assert other.status_code == 409
    assert LlmJob.objects.count() == 1


def test_a_429_is_retried_and_a_request_error_is_fatal(
    alice_client, workers, fake_provider, local_openai
):
    job = _embed(alice_client)
    fake_provider.http.post(
        "/_fake/faults", json={"next": ["429", "ok"], "key": str(job.id)}
    ).raise_for_status()
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    first, second = CostEntry.objects.filter(job=job).order_by("attempt")
    assert first.reason_code == "rate_limited" and first.cost_usd == 0
    assert second.outcome == "success" and second.input_tokens > 0

    fake_provider.faults({"400": 1.0})
    bad = _embed(alice_client)
    workers.drain()
    bad.refresh_from_db()
    assert bad.status == "failed" and bad.attempts == 1 and bad.error_code == "invalid_request"
    (failure,) = FailureRecord.objects.filter(job=bad)
    assert failure.http_status == 400


def test_insufficient_quota_holds_the_embedding_jobs_of_that_provider_only(
    alice_client, workers, fake_provider, local_openai
):
    fake_provider.faults({"insufficient_quota": 1.0})
    jobs = [_embed(alice_client) for _ in range(3)]
    claude = submit(alice_client)
    workers.drain()
    breaker = ProviderBreaker.objects.get(provider="local-openai")
    assert breaker.is_open and breaker.reason_code == "insufficient_quota"
    claude.refresh_from_db()
    assert claude.status == "completed"
    held = LlmJob.objects.filter(id__in=[j.id for j in jobs], status="queued")
    assert held.count() == 2


def test_a_hung_embedding_call_is_abandoned_within_the_idle_bound(
    alice_client, workers, fake_provider, local_openai, settings
):
    settings.LLM_STREAM_IDLE_SECONDS = 2.0
    fake_provider.faults({"stall": 1.0})
    job = _embed(alice_client)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.error_code == "read_timeout"
    entries = list(CostEntry.objects.filter(job=job))
    assert entries and all(e.outcome == "unknown_outcome" for e in entries)
    # Booked at the input's upper bound: the provider billed the input.
    assert all(e.cost_usd > 0 and e.is_estimated for e in entries)


def _script(fake_provider: Any, job: LlmJob, steps: list[str]) -> None:
    fake_provider.http.post(
        "/_fake/faults", json={"next": steps, "key": str(job.id)}
    ).raise_for_status()


def test_an_answer_that_repeats_an_index_is_refused_and_the_retry_stores_vectors_in_order(
    alice_client, workers, fake_provider, local_openai
):
    job = _embed(alice_client)
    # Four vectors, the count right, the last one labelled index 0: sorted by index it would
    # land on the second input.
    _script(fake_provider, job, ["repeat_index", "ok"])
    workers.work_once()

    job.refresh_from_db()
    assert job.status == "retrying" and job.attempts == 1
    assert not EmbeddingChunk.objects.filter(job=job).exists()
    body = alice_client.get(f"/api/v1/embeddings/{job.id}/").json()
    assert body["output"] is None
    assert body["error"]["code"] == "unexpected_error"
    assert "UnreadableResponse" in body["error"]["message"]
    assert "index 0 given twice" in body["error"]["message"]
    # The provider answered 200 and billed the call: booked at its upper bound, like any
    # unreadable 2xx.
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.outcome == "error" and entry.reason_code == "unexpected_error"
    assert entry.is_estimated and entry.cost_usd > 0
    (billed,) = _billed(fake_provider)
    assert entry.cost_usd >= Decimal(billed["cost_usd"])

    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    output = alice_client.get(f"/api/v1/embeddings/{job.id}/").json()["output"]
    for text, vector in zip(TEXTS, output["embeddings"], strict=True):
        assert _close(vector, fake_vector(EMBEDDING_MODEL, text, 1536).tolist())


def test_an_answer_that_skips_an_index_never_completes_the_job(
    alice_client, workers, fake_provider, local_openai
):
    fake_provider.faults({"skip_index": 1.0})
    job = _embed(alice_client)
    workers.drain()

    job.refresh_from_db()
    # Refused every time: retried as an unreadable answer (twice), then dead-lettered.
    assert job.status == "failed" and job.error_code == "unexpected_error"
    assert job.attempts == 3
    assert "index 3 missing; index 4 out of range" in job.error_message
    assert not EmbeddingChunk.objects.filter(job=job).exists()
    assert alice_client.get(f"/api/v1/embeddings/{job.id}/").json()["output"] is None
    (failure,) = FailureRecord.objects.filter(job=job)
    assert failure.reason_code == "unexpected_error" and failure.retries_exhausted
    entries = list(CostEntry.objects.filter(job=job))
    billed = _billed(fake_provider)
    assert len(entries) == len(billed) == 3
    assert all(e.outcome == "error" and e.is_estimated for e in entries)
    assert sum(e.cost_usd for e in entries) >= sum(Decimal(b["cost_usd"]) for b in billed)
