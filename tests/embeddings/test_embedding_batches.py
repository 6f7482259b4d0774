"""Embedding batches (issue 23) on the real stack: 1,000 items, duplicates embedded once, the
texts grouped into provider requests, the vectors read back in item order, the ledger equal to
the fake provider's bill."""

import math
from decimal import Decimal
from typing import Any

import pytest

from batches.models import Batch, BatchItem
from fake_provider.openai_embeddings import fake_vector
from jobs.models import LlmJob
from ledger.models import CostEntry
from tests.embeddings.conftest import EMBEDDING_MODEL

pytestmark = [pytest.mark.django_db(transaction=True)]


def _items(n: int, distinct: int) -> list[dict[str, Any]]:
    return [{"input": f"text number {i % distinct}", "metadata": {"row": i}} for i in range(n)]


def _all_vectors(client: Any, batch_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    url: str | None = f"/api/v1/batches/{batch_id}/embeddings/?page_size=200"
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        out.extend(response.json()["results"])
        url = response.json()["next"]
    return out


def test_a_1000_item_embedding_batch(alice_client, workers, fake_provider, local_openai, settings):
    settings.LLM_EMBEDDING_GROUP_SIZE = 128
    items = _items(1000, distinct=700)
    response = alice_client.post(
        "/api/v1/batches/",
        {"kind": "embedding", "feature": "backfill", "model": EMBEDDING_MODEL,
         "dimensions": 64, "items": items},
        format="json",
    )  # fmt: skip
    assert response.status_code == 202, response.content
    batch = Batch.objects.get(id=response.json()["id"])
    # 700 distinct texts in groups of 128: 6 provider requests.
    assert batch.kind == "embedding" and batch.total == 1000 and batch.jobs_total == 6
    jobs = LlmJob.objects.filter(batch_items__batch=batch).distinct()
    assert jobs.count() == 6 and {job.kind for job in jobs} == {"embedding"}
    assert sorted(len(job.input) for job in jobs) == [60, 128, 128, 128, 128, 128]
    workers.drain()

    batch.refresh_from_db()
    assert batch.status == "completed" and batch.completed == 1000 and batch.pending == 0
    body = alice_client.get(f"/api/v1/batches/{batch.id}/").json()
    assert body["kind"] == "embedding" and body["completed"] == 1000
    # Duplicates were embedded once: the provider saw 700 texts in 6 calls.
    stats = fake_provider.http.get("/_fake/stats").json()
    assert stats["embedded_inputs"] == 700 and stats["by_status"] == {"200": 6}

    results = _all_vectors(alice_client, str(batch.id))
    assert [r["index"] for r in results] == list(range(1000))
    for result, item in zip(results, items, strict=True):
        assert result["status"] == "completed" and result["metadata"] == item["metadata"]
        expected = fake_vector(EMBEDDING_MODEL, item["input"], 64).tolist()
        assert len(result["embedding"]) == 64
        assert all(math.isclose(x, y, abs_tol=1e-7)
                   for x, y in zip(result["embedding"], expected, strict=True))  # fmt: skip

    # One ledger row per provider call, and the ledger equals the bill.
    entries = list(CostEntry.objects.filter(job__in=jobs))
    assert len(entries) == 6 and {e.outcome for e in entries} == {"success"}
    billed = fake_provider.http.get("/_fake/billing").json()["calls"]
    assert len(billed) == 6
    assert sum(e.input_tokens for e in entries) == stats["billed"]["input_tokens"]
    ledger = sum((e.cost_usd for e in entries), Decimal(0))
    bill = sum((Decimal(c["cost_usd"]) for c in billed), Decimal(0))
    # Each row is the bill of its call rounded to the micro-dollar.
    assert abs(ledger - bill) <= Decimal("0.000001") * len(entries)
    tokens = sum(e.input_tokens for e in entries)
    assert bill == Decimal(tokens) * Decimal("0.02") / Decimal(1_000_000)


def test_an_embedding_batch_refuses_bad_items_and_chat_models(alice_client, local_openai):
    def post(**body: Any) -> Any:
        return alice_client.post(
            "/api/v1/batches/",
            {"kind": "embedding", "feature": "backfill", "model": EMBEDDING_MODEL, **body},
            format="json",
        )

    response = post(items=[{"input": "ok"}, {"input": ""}, {"text": "x"}, "nope"])
    assert response.status_code == 400 and response.json()["code"] == "invalid_items"
    assert response.json()["detail"]["indexes"] == [1, 2, 3]
    response = post(model="claude-sonnet-4-6", items=[{"input": "ok"}])
    assert response.status_code == 400 and response.json()["code"] == "invalid_model"
    response = post(kind="embeddings", items=[{"input": "ok"}])
    assert response.status_code == 400 and response.json()["code"] == "invalid_kind"
    response = post(dimensions=-1, items=[{"input": "ok"}])
    assert response.status_code == 400 and response.json()["code"] == "invalid_dimensions"
    assert not Batch.objects.exists() and not LlmJob.objects.exists()
    assert not BatchItem.objects.exists()


def test_a_chat_batch_has_no_embeddings_page(alice_client, local_openai):
    response = alice_client.post(
        "/api/v1/batches/",
        {"feature": "f", "model": "claude-sonnet-4-6",
         "items": [{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}]},
        format="json",
    )  # fmt: skip
    assert response.status_code == 202
    response = alice_client.get(f"/api/v1/batches/{response.json()['id']}/embeddings/")
    assert response.status_code == 400 and response.json()["code"] == "not_an_embedding_batch"
