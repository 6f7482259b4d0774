"""The HTTP contract of /api/v1/jobs/: submit, poll, list, cancel, errors and isolation."""

import json
import uuid

import django_rq
import pytest
from rest_framework.test import APIClient

from jobs.models import LlmJob
from ledger.models import CostEntry
from tests.conftest import job_body, submit

pytestmark = pytest.mark.django_db


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"code", "message", "detail"}
    assert body["code"] == code
    assert body["message"]
    return body


def test_it_accepts_a_job_and_points_at_its_status(alice_client):
    response = alice_client.post("/api/v1/jobs/", job_body(), format="json")
    assert response.status_code == 202
    body = response.json()
    job_id = body["id"]
    assert uuid.UUID(job_id)
    assert body == {"id": job_id, "status": "queued", "status_url": f"/api/v1/jobs/{job_id}/"}
    assert response["Location"].endswith(f"/api/v1/jobs/{job_id}/")


@pytest.mark.django_db(transaction=True)
def test_it_enqueues_on_the_llm_queue_only_after_commit(prices, alice_client):
    response = alice_client.post("/api/v1/jobs/", job_body(), format="json")
    job = LlmJob.objects.get(id=response.json()["id"])
    queue = django_rq.get_queue("llm")
    assert queue.job_ids == [job.rq_job_id]
    assert queue.fetch_job(job.rq_job_id).args == (str(job.id),)


def test_it_shows_a_queued_job(alice_client):
    job = submit(alice_client, system="Be brief.", temperature=0.2, metadata={"ticket": 7})
    body = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
    assert set(body) == {
        "id", "status", "feature", "model", "served_by", "kind", "mode", "priority",
        "provider_batch", "concurrency_key", "attempts", "created_at", "started_at",
        "completed_at", "duration_ms", "next_attempt_at", "output", "usage", "cost_usd", "error",
        "tags", "deadline", "held_reason", "pruned_at",
    }  # fmt: skip
    assert body["status"] == "queued"
    assert body["held_reason"] is None and body["pruned_at"] is None
    assert body["priority"] == "normal"
    assert body["attempts"] == 0
    assert body["output"] is None and body["usage"] is None and body["error"] is None
    assert body["cost_usd"] == "0.000000"
    assert job.system == "Be brief." and job.temperature == 0.2 and job.metadata == {"ticket": 7}


def test_it_accepts_content_blocks(alice_client):
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Long context", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Question?"},
            ],
        }
    ]
    job = submit(alice_client, messages=messages, system=[{"type": "text", "text": "sys"}])
    assert job.messages == messages


def test_unauthenticated_requests_get_401(db):
    client = APIClient()
    assert_error(client.post("/api/v1/jobs/", job_body(), format="json"), 401, "not_authenticated")
    assert_error(client.get("/api/v1/jobs/"), 401, "not_authenticated")
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token nope")
    assert_error(bad.get("/api/v1/jobs/"), 401, "authentication_failed")


def test_session_auth_works_too(alice):
    client = APIClient()
    client.force_login(alice)
    assert client.get("/api/v1/jobs/").status_code == 200


def test_another_users_job_is_not_found(alice_client, bob_client):
    job = submit(alice_client)
    assert_error(bob_client.get(f"/api/v1/jobs/{job.id}/"), 404, "job_not_found")
    assert_error(bob_client.post(f"/api/v1/jobs/{job.id}/cancel/"), 404, "job_not_found")
    assert bob_client.get("/api/v1/jobs/").json()["count"] == 0
    assert_error(alice_client.get("/api/v1/jobs/not-a-uuid/"), 404, "job_not_found")


@pytest.mark.parametrize(
    "overrides,code",
    [
        ({"model": "gpt-4o"}, "unknown_model"),
        ({"model": ""}, "unknown_model"),
        ({"feature": "Email Classify!"}, "invalid_feature"),
        ({"feature": ""}, "invalid_feature"),
        ({"feature": "x" * 65}, "invalid_feature"),
        ({"feature": "email-classify\n"}, "invalid_feature"),
        ({"messages": []}, "invalid_messages"),
        ({"messages": "hello"}, "invalid_messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "invalid_messages"),
        ({"messages": [{"role": {}, "content": "hi"}]}, "invalid_messages"),
        ({"messages": [{"role": ["user"], "content": "hi"}]}, "invalid_messages"),
        ({"messages": [{"role": "user", "content": ""}]}, "invalid_messages"),
        ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "invalid_messages"),
        ({"messages": [{"role": "user", "content": [{"type": "bogus"}]}]}, "invalid_messages"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "invalid_messages"),
        ({"max_tokens": 0}, "invalid_max_tokens"),
        ({"max_tokens": "512"}, "invalid_max_tokens"),
        ({"max_tokens": 64_001}, "invalid_max_tokens"),
        ({"temperature": 1.5}, "invalid_temperature"),
        ({"system": 42}, "invalid_system"),
        ({"metadata": [1, 2]}, "invalid_metadata"),
        ({"stream": True}, "unknown_field"),
    ],
)
def test_each_validation_error_has_its_code_and_writes_nothing(alice_client, overrides, code):
    body = job_body(**overrides)
    assert_error(alice_client.post("/api/v1/jobs/", body, format="json"), 400, code)
    assert LlmJob.objects.count() == 0
    assert django_rq.get_queue("llm").count == 0


def test_missing_fields_are_refused(alice_client):
    for field, code in [
        ("feature", "invalid_feature"),
        ("model", "unknown_model"),
        ("messages", "invalid_messages"),
        ("max_tokens", "invalid_max_tokens"),
    ]:
        body = job_body()
        del body[field]
        assert_error(alice_client.post("/api/v1/jobs/", body, format="json"), 400, code)


def test_max_tokens_limit_follows_the_model(alice_client):
    from ledger.models import ModelPrice

    base = ModelPrice.objects.filter(model="claude-haiku-4-5").first()
    assert base is not None
    base.pk, base.model, base.max_output_tokens = None, "claude-small-test", 4096
    base.save()
    submit(alice_client, model="claude-small-test", max_tokens=4096)
    response = alice_client.post(
        "/api/v1/jobs/", job_body(model="claude-small-test", max_tokens=4097), format="json"
    )
    assert assert_error(response, 400, "invalid_max_tokens")["detail"]["maximum"] == 4096


def test_max_tokens_may_reach_the_models_own_output_limit(alice_client):
    """Every call streams: no ten-minute ceiling below the model's limit (128,000 for Opus 4.6,
    64,000 for Sonnet 4.6 and Haiku 4.5); above it, 400 with the maximum."""
    for model, maximum in (
        ("claude-opus-4-6", 128_000),
        ("claude-sonnet-4-6", 64_000),
        ("claude-haiku-4-5", 64_000),
    ):
        submit(alice_client, model=model, max_tokens=maximum)
        response = alice_client.post(
            "/api/v1/jobs/", job_body(model=model, max_tokens=maximum + 1), format="json"
        )
        body = assert_error(response, 400, "invalid_max_tokens")
        assert body["detail"] == {"field": "max_tokens", "maximum": maximum}
        assert str(maximum) in body["message"] and model in body["message"]
        assert LlmJob.objects.filter(model=model, max_tokens=maximum + 1).count() == 0


def test_a_body_over_the_limit_gets_413(alice_client, settings):
    settings.LLM_MAX_REQUEST_BYTES = 2048
    body = job_body(messages=[{"role": "user", "content": "x" * 4096}])
    assert_error(alice_client.post("/api/v1/jobs/", body, format="json"), 413, "request_too_large")
    assert LlmJob.objects.count() == 0


def test_non_json_bodies_are_refused(alice_client):
    response = alice_client.post("/api/v1/jobs/", "feature=x", content_type="text/plain")
    assert_error(response, 415, "unsupported_media_type")
    response = alice_client.post("/api/v1/jobs/", "{not json", content_type="application/json")
    assert_error(response, 400, "malformed_json")
    response = alice_client.post("/api/v1/jobs/", "[1, 2]", content_type="application/json")
    assert_error(response, 400, "invalid_body")
    assert LlmJob.objects.count() == 0


def test_an_idempotency_key_returns_the_first_job(alice_client, bob_client):
    first = alice_client.post(
        "/api/v1/jobs/", job_body(), format="json", HTTP_IDEMPOTENCY_KEY="order-42"
    )
    again = alice_client.post(
        "/api/v1/jobs/", job_body(), format="json", HTTP_IDEMPOTENCY_KEY="order-42"
    )
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    assert LlmJob.objects.count() == 1
    # Keys are per user.
    other = bob_client.post(
        "/api/v1/jobs/", job_body(), format="json", HTTP_IDEMPOTENCY_KEY="order-42"
    )
    assert other.json()["id"] != first.json()["id"]


def test_an_idempotency_key_reused_with_another_body_conflicts(alice_client):
    alice_client.post("/api/v1/jobs/", job_body(), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    response = alice_client.post(
        "/api/v1/jobs/", job_body(max_tokens=100), format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )
    assert_error(response, 409, "idempotency_conflict")
    assert LlmJob.objects.count() == 1


def test_idempotency_keys_compare_byte_for_byte(alice_client, alice):
    """MariaDB's default collation folds case and trailing spaces; keys must not."""
    ids = {
        alice_client.post(
            "/api/v1/jobs/", job_body(), format="json", HTTP_IDEMPOTENCY_KEY=key
        ).json()["id"]
        for key in ("Key-A", "key-a", "KEY-A", "Straße", "STRASSE")
    }
    assert len(ids) == 5
    # Trailing spaces cannot travel in an HTTP header; the service compares them exactly too.
    from jobs.services import job_submit

    first, created = job_submit(user=alice, data=job_body(), idempotency_key="order 7")
    padded, padded_created = job_submit(user=alice, data=job_body(), idempotency_key="order 7 ")
    assert created and padded_created and first.id != padded.id
    again, again_created = job_submit(user=alice, data=job_body(), idempotency_key="order 7 ")
    assert again.id == padded.id and not again_created
    assert LlmJob.objects.count() == 7


def test_list_is_newest_first_filtered_and_paginated(alice_client):
    a = submit(alice_client, feature="alpha")
    b = submit(alice_client, feature="beta")
    c = submit(alice_client, feature="beta")
    LlmJob.objects.filter(id=a.id).update(status="completed")
    listing = alice_client.get("/api/v1/jobs/").json()
    assert listing["count"] == 3
    assert [j["id"] for j in listing["results"]] == [str(c.id), str(b.id), str(a.id)]
    assert alice_client.get("/api/v1/jobs/?feature=beta").json()["count"] == 2
    completed = alice_client.get("/api/v1/jobs/?status=completed").json()
    assert [j["id"] for j in completed["results"]] == [str(a.id)]
    page = alice_client.get("/api/v1/jobs/?page_size=2").json()
    assert len(page["results"]) == 2 and page["next"]
    assert_error(alice_client.get("/api/v1/jobs/?status=bogus"), 400, "invalid_filter")


def test_cancel_a_queued_job(alice_client):
    job = submit(alice_client)
    response = alice_client.post(f"/api/v1/jobs/{job.id}/cancel/")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert_error(alice_client.post(f"/api/v1/jobs/{job.id}/cancel/"), 409, "not_cancellable")


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_cancel_refuses_jobs_that_are_final(alice_client, status):
    job = submit(alice_client)
    LlmJob.objects.filter(id=job.id).update(status=status)
    body = assert_error(alice_client.post(f"/api/v1/jobs/{job.id}/cancel/"), 409, "not_cancellable")
    assert body["detail"] == {"status": status}


def test_cancel_of_a_running_job_no_worker_ends_answers_202_and_marks_it(alice_client, settings):
    """With no worker to close its stream, the answer waits LLM_CANCEL_WAIT_SECONDS and says the
    job still runs; the row keeps the request, for the worker (or the reconciler) to act on."""
    settings.LLM_CANCEL_WAIT_SECONDS = 0.3
    job = submit(alice_client)
    LlmJob.objects.filter(id=job.id).update(status="running", attempts=1)
    response = alice_client.post(f"/api/v1/jobs/{job.id}/cancel/")
    assert response.status_code == 202 and response.json()["status"] == "running"
    job.refresh_from_db()
    assert job.cancel_requested_at is not None
    # Asked twice: the first request stands.
    first = job.cancel_requested_at
    assert alice_client.post(f"/api/v1/jobs/{job.id}/cancel/").status_code == 202
    job.refresh_from_db()
    assert job.cancel_requested_at == first


def test_cost_is_a_decimal_string_with_six_places(alice_client):
    job = submit(alice_client)
    CostEntry.objects.create(
        job=job, attempt=1, feature=job.feature, model=job.model, outcome="success"
    )
    LlmJob.objects.filter(id=job.id).update(cost_usd="0.004215")
    body = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
    assert body["cost_usd"] == "0.004215"
    assert json.loads(json.dumps(body))["cost_usd"] == "0.004215"
