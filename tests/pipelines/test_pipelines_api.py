"""The HTTP contract of /api/v1/pipelines/: submit, validation of every step, who sees what, the
list, and the request of each step's job."""

import uuid
from decimal import Decimal

import django_rq
import pytest
from rest_framework.test import APIClient

from jobs.models import LlmJob
from pipelines.models import Pipeline, PipelineStep
from tests.conftest import _client_for, job_body, make_user
from tests.pipelines.helpers import create_pipeline, detail, step, three_steps

pytestmark = pytest.mark.django_db


def refused(client: APIClient, body: dict, status: int, code: str) -> dict:
    response = client.post("/api/v1/pipelines/", body, format="json")
    assert response.status_code == status, response.content
    error = response.json()
    assert set(error) == {"code", "message", "detail"} and error["code"] == code
    assert Pipeline.objects.count() == 0 and PipelineStep.objects.count() == 0
    assert LlmJob.objects.count() == 0 and django_rq.get_queue("llm").count == 0
    return error


def test_it_accepts_a_pipeline_and_points_at_its_status(alice_client):
    response = alice_client.post("/api/v1/pipelines/", {"steps": three_steps()}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    pipeline_id = body["id"]
    assert uuid.UUID(pipeline_id)
    assert body == {
        "id": pipeline_id,
        "status": "running",
        "status_url": f"/api/v1/pipelines/{pipeline_id}/",
    }
    assert response["Location"].endswith(f"/api/v1/pipelines/{pipeline_id}/")


def test_it_shows_every_step_and_only_the_first_has_a_job(alice_client):
    pipeline = create_pipeline(alice_client, three_steps(), name="refund flow")
    body = detail(alice_client, pipeline)
    assert set(body) == {
        "id", "name", "status", "step_count", "created_at", "finished_at", "cost_usd", "steps",
        "tags", "deadline",
    }  # fmt: skip
    assert body["name"] == "refund flow" and body["status"] == "running"
    assert body["step_count"] == 3 and body["finished_at"] is None
    assert body["cost_usd"] == "0.000000"
    first, second, third = body["steps"]
    assert set(first) == {
        "index", "status", "job_id", "feature", "model", "attempts", "started_at",
        "completed_at", "output", "error", "cost_usd",
    }  # fmt: skip
    job = LlmJob.objects.get()
    assert first["job_id"] == str(job.id) and first["status"] == "queued"
    assert [s["index"] for s in body["steps"]] == [0, 1, 2]
    assert second == {
        "index": 1, "status": "pending", "job_id": None, "feature": "summarize",
        "model": "claude-sonnet-4-6", "attempts": 0, "started_at": None, "completed_at": None,
        "output": None, "error": None, "cost_usd": "0.000000",
    }  # fmt: skip
    # The step's job is an ordinary job of the owner, marked with its pipeline and step.
    assert job.user == pipeline.user and job.messages == three_steps()[0]["messages"]
    assert job.metadata == {"llmops_pipeline": {"id": str(pipeline.id), "step": 0}}
    assert alice_client.get(f"/api/v1/jobs/{job.id}/").status_code == 200


def test_it_keeps_the_metadata_each_step_was_sent_with(alice_client):
    pipeline = create_pipeline(alice_client, [step("Hello", metadata={"ticket": 7})])
    assert pipeline.steps.get().job.metadata == {
        "ticket": 7,
        "llmops_pipeline": {"id": str(pipeline.id), "step": 0},
    }


def test_one_bad_step_refuses_the_pipeline_naming_every_bad_step(alice_client):
    steps = [
        step("fine"),
        job_body(messages=[]),
        step("fine too"),
        job_body(model="gpt-4"),
        job_body(max_tokens=10**6),
    ]
    error = refused(alice_client, {"steps": steps}, 400, "invalid_steps")
    assert error["detail"]["indexes"] == [1, 3, 4]
    errors = error["detail"]["errors"]
    assert [(e["index"], e["code"], e["field"]) for e in errors] == [
        (1, "invalid_messages", "messages"),
        (3, "unknown_model", "model"),
        (4, "invalid_max_tokens", "max_tokens"),
    ]
    assert all(e["message"] for e in errors)


MALFORMED = [
    ({}, "invalid_steps", {"field": "steps", "indexes": []}),
    ({"steps": []}, "invalid_steps", {"field": "steps", "indexes": []}),
    ({"steps": {"0": job_body()}}, "invalid_steps", {"field": "steps", "indexes": []}),
    # PIPELINE_MAX_STEPS is 2 here.
    ({"steps": [job_body()] * 3}, "too_many_steps", {"field": "steps", "maximum": 2}),
    ({"steps": [job_body()], "stream": True}, "unknown_field", {"fields": ["stream"]}),
    ({"steps": [job_body()], "name": 7}, "invalid_name", {"field": "name"}),
    ({"steps": [job_body()], "name": "x" * 201}, "invalid_name", {"field": "name"}),
    ({"steps": [job_body()], "name": "a\nb"}, "invalid_name", {"field": "name"}),
    ([job_body()], "invalid_body", None),
]


def test_it_refuses_a_malformed_pipeline(alice_client, settings):
    # One test for every case: each test's user costs a password hash.
    settings.PIPELINE_MAX_STEPS = 2
    for body, code, expected in MALFORMED:
        assert refused(alice_client, body, 400, code)["detail"] == expected


def test_the_first_step_has_no_previous_output_to_use(alice_client):
    error = refused(alice_client, {"steps": [step("Go on: {{previous}}")]}, 400, "invalid_steps")
    assert error["detail"]["errors"][0]["code"] == "invalid_previous"


def test_the_pipeline_marker_in_metadata_is_reserved(alice_client):
    steps = [step("a"), step("b", metadata={"llmops_pipeline": {"id": "x"}})]
    error = refused(alice_client, {"steps": steps}, 400, "invalid_steps")
    assert error["detail"]["indexes"] == [1]
    (problem,) = error["detail"]["errors"]
    assert problem["code"] == "invalid_metadata" and problem["field"] == "metadata.llmops_pipeline"


def test_a_spent_budget_refuses_the_pipeline_with_429_naming_its_steps(alice, alice_client):
    from tests.ledger.test_budgets import FEATURE, feature_budget, spend

    spend(feature_budget(limit_usd=Decimal("0.01")), Decimal("0.01"), alice=alice)
    jobs_before = LlmJob.objects.count()  # the spend's own job
    steps = [step("a"), step("b", feature=FEATURE), step("c", feature=FEATURE)]
    response = alice_client.post("/api/v1/pipelines/", {"steps": steps}, format="json")
    assert response.status_code == 429, response.content
    error = response.json()
    assert error["code"] == "budget_exceeded" and int(response["Retry-After"]) > 0
    assert error["detail"]["indexes"] == [1, 2]
    assert error["detail"]["budgets"][0]["budget"] == f"feature:{FEATURE}"
    assert Pipeline.objects.count() == 0 and LlmJob.objects.count() == jobs_before


def test_only_the_owner_and_staff_see_a_pipeline(alice_client, bob_client):
    pipeline = create_pipeline(alice_client, three_steps())
    for url in (f"/api/v1/pipelines/{pipeline.id}/", f"/api/v1/pipelines/{uuid.uuid4()}/"):
        response = bob_client.get(url)
        assert response.status_code == 404 and response.json()["code"] == "pipeline_not_found"
    cancel = bob_client.post(f"/api/v1/pipelines/{pipeline.id}/cancel/")
    assert cancel.status_code == 404
    assert alice_client.get("/api/v1/pipelines/not-a-uuid/").status_code == 404
    # Staff status alone opens nothing of another user's: the model permissions do.
    plain_staff = _client_for(make_user("sid", is_staff=True))
    assert plain_staff.get(f"/api/v1/pipelines/{pipeline.id}/").status_code == 404
    staff = _client_for(make_user("sam", "view_pipeline", is_staff=True))
    assert staff.get(f"/api/v1/pipelines/{pipeline.id}/").status_code == 200
    assert staff.post(f"/api/v1/pipelines/{pipeline.id}/cancel/").status_code == 404
    anonymous = APIClient().get(f"/api/v1/pipelines/{pipeline.id}/")
    assert anonymous.status_code == 401
    pipeline.refresh_from_db()
    assert pipeline.status == "running"


def test_it_lists_only_your_own_pipelines_newest_first(alice_client, bob_client):
    first = create_pipeline(alice_client, three_steps(), name="first")
    second = create_pipeline(alice_client, [step("only")], name="second")
    create_pipeline(bob_client, [step("bob's")])
    body = alice_client.get("/api/v1/pipelines/").json()
    assert body["count"] == 2
    assert [p["id"] for p in body["results"]] == [str(second.id), str(first.id)]
    assert set(body["results"][0]) == {
        "id", "name", "status", "step_count", "created_at", "finished_at", "cost_usd",
        "tags", "deadline",
    }  # fmt: skip
    assert body["results"][1]["step_count"] == 3
    running = alice_client.get("/api/v1/pipelines/?status=running&page_size=1").json()
    assert running["count"] == 2 and len(running["results"]) == 1
    assert alice_client.get("/api/v1/pipelines/?status=completed").json()["count"] == 0
    bad = alice_client.get("/api/v1/pipelines/?status=done")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_filter"


def test_a_pipeline_counts_against_the_submit_rate_shared_with_jobs(alice_client, settings):
    settings.LLM_SUBMIT_THROTTLE_RATE = "2/min"
    assert alice_client.post("/api/v1/jobs/", job_body(), format="json").status_code == 202
    create_pipeline(alice_client, three_steps())
    response = alice_client.post("/api/v1/pipelines/", {"steps": three_steps()}, format="json")
    assert response.status_code == 429 and response.json()["code"] == "throttled"
    assert int(response["Retry-After"]) >= 1
    assert Pipeline.objects.count() == 1
    assert alice_client.get("/api/v1/pipelines/").status_code == 200
