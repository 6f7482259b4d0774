"""Pipelines through real workers, the real fake provider, MariaDB and Redis: outputs passed
along, a failed step stopping the pipeline, a requeue from the DLQ resuming it, cancel."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dlq.services import failure_requeue
from jobs.models import LlmJob
from pipelines.models import Pipeline
from tests.conftest import submit
from tests.pipelines.helpers import (
    create_pipeline,
    detail,
    statuses,
    step,
    three_steps,
    work_one,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def step_jobs(body: dict) -> list[LlmJob]:
    return [LlmJob.objects.get(id=s["job_id"]) for s in body["steps"] if s["job_id"]]


def test_it_runs_three_steps_in_order_passing_each_output_to_the_next(
    alice_client, workers, fake_provider
):
    steps = three_steps()
    # The placeholder works in text blocks and in system too, with spaces inside the braces.
    steps[2]["messages"] = [
        {"role": "user", "content": [{"type": "text", "text": "Translate: {{ previous }}"}]}
    ]
    steps[2]["system"] = "Context: {{previous}}"
    pipeline = create_pipeline(alice_client, steps, name="reply, shorten, translate")
    # Only the first step has a job until it completes.
    assert LlmJob.objects.count() == 1
    assert statuses(detail(alice_client, pipeline)) == ["queued", "pending", "pending"]

    workers.drain()

    body = detail(alice_client, pipeline)
    assert body["status"] == "completed" and body["finished_at"]
    assert statuses(body) == ["completed", "completed", "completed"]
    first, second, third = step_jobs(body)
    assert second.messages == [{"role": "user", "content": f"Shorten: {first.output_text}"}]
    assert third.messages[0]["content"][0]["text"] == f"Translate: {second.output_text}"
    assert third.system == f"Context: {second.output_text}"
    # What the provider received: its reply quotes the start of the last user message.
    assert second.output_text.startswith("Fake reply to: Shorten: Fake reply to: Draft")
    assert third.output_text.startswith("Fake reply to: Translate: Fake reply to: Shorten:")
    # Each step started only once the previous one had completed, and was called once.
    assert first.completed_at <= second.created_at and second.completed_at <= third.created_at
    assert fake_provider.stats()["requests"] == 3
    assert [j.attempts for j in (first, second, third)] == [1, 1, 1]
    assert second.feature == "summarize" and third.max_tokens == 128
    assert body["steps"][1]["output"] == {
        "text": second.output_text,
        "stop_reason": "end_turn",
        "content": [{"type": "text", "text": second.output_text}],
    }
    assert Decimal(body["cost_usd"]) == first.cost_usd + second.cost_usd + third.cost_usd > 0
    assert body["steps"][2]["cost_usd"] == f"{third.cost_usd:.6f}"


def test_a_failed_step_stops_the_pipeline_and_a_requeue_resumes_it_without_rerunning(
    alice_client, workers, fake_provider
):
    pipeline = create_pipeline(alice_client, three_steps())
    work_one()  # step 0 completes; step 1's job is queued
    fake_provider.faults({"400": 1.0})  # fatal: dead-lettered at once
    workers.drain()

    body = detail(alice_client, pipeline)
    assert body["status"] == "failed" and body["finished_at"]
    assert statuses(body) == ["completed", "failed", "cancelled"]
    assert body["steps"][1]["error"]["code"] == "invalid_request"
    assert body["steps"][2]["job_id"] is None  # the step after never got a job
    first, failed = step_jobs(body)
    assert fake_provider.stats()["requests"] == 2

    fake_provider.reset()
    assert failure_requeue(record=failed.failures.get()) is True
    body = detail(alice_client, pipeline)
    assert body["status"] == "running" and body["finished_at"] is None
    assert statuses(body) == ["completed", "queued", "pending"]

    workers.drain()
    body = detail(alice_client, pipeline)
    assert body["status"] == "completed"
    assert statuses(body) == ["completed", "completed", "completed"]
    # Steps 1 and 2 ran; step 0 was not called again.
    assert fake_provider.stats()["requests"] == 2
    first.refresh_from_db()
    assert first.attempts == 1
    assert step_jobs(body)[0].id == first.id


def test_cancel_stops_a_waiting_pipeline_before_any_call(alice_client, workers, fake_provider):
    pipeline = create_pipeline(alice_client, three_steps())
    response = alice_client.post(f"/api/v1/pipelines/{pipeline.id}/cancel/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "cancelled" and body["finished_at"]
    assert statuses(body) == ["cancelled", "cancelled", "cancelled"]
    workers.drain()
    assert fake_provider.stats()["requests"] == 0
    assert LlmJob.objects.count() == 1

    again = alice_client.post(f"/api/v1/pipelines/{pipeline.id}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "not_cancellable"


def test_cancelling_the_current_step_job_cancels_the_pipeline(alice_client, workers, fake_provider):
    pipeline = create_pipeline(alice_client, three_steps())
    work_one()
    second = step_jobs(detail(alice_client, pipeline))[1]
    response = alice_client.post(f"/api/v1/jobs/{second.id}/cancel/")
    assert response.status_code == 200, response.content
    workers.drain()
    body = detail(alice_client, pipeline)
    assert body["status"] == "cancelled"
    assert statuses(body) == ["completed", "cancelled", "cancelled"]
    assert fake_provider.stats()["requests"] == 1


@pytest.mark.django_db  # no worker, no commit needed: the test's transaction is enough
def test_a_step_running_when_cancelled_finishes_but_nothing_follows(alice_client, fake_provider):
    from jobs.services import SuccessResult, job_claim, job_complete

    pipeline = create_pipeline(alice_client, three_steps())
    first = pipeline.steps.get(index=0).job
    job_claim(job_id=str(first.id))  # a worker took it: it can no longer be cancelled
    response = alice_client.post(f"/api/v1/pipelines/{pipeline.id}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    usage = {"input_tokens": 5, "output_tokens": 7}
    usage |= {"cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0, "cache_read_tokens": 0}
    result = SuccessResult("done", "end_turn", usage, 200, "req_1", 10)
    job_complete(job_id=first.id, attempt=1, result=result)

    body = detail(alice_client, pipeline)
    assert body["status"] == "cancelled"
    assert statuses(body) == ["completed", "cancelled", "cancelled"]
    assert LlmJob.objects.count() == 1


def test_a_step_refused_at_start_fails_the_pipeline_and_not_the_step_before(
    alice, alice_client, workers, fake_provider
):
    from tests.ledger.test_budgets import FEATURE, feature_budget, spend

    pipeline = create_pipeline(
        alice_client, [step("Draft a reply"), step("Shorten: {{previous}}", feature=FEATURE)]
    )
    # The second step's budget is spent after the pipeline was accepted.
    spend(feature_budget(limit_usd=Decimal("0.01")), Decimal("0.01"), alice=alice)
    workers.drain()

    body = detail(alice_client, pipeline)
    assert body["status"] == "failed"
    assert statuses(body) == ["completed", "failed"]
    refused = body["steps"][1]
    assert refused["job_id"] is None and refused["error"]["code"] == "budget_exceeded"
    assert fake_provider.stats()["requests"] == 1


def test_a_job_outside_any_pipeline_pays_no_query_for_pipelines(alice_client, workers):
    job = submit(alice_client)
    with CaptureQueriesContext(connection) as queries:
        workers.drain()
        alice_client.post(f"/api/v1/jobs/{submit(alice_client).id}/cancel/")
    job.refresh_from_db()
    assert job.status == "completed"
    assert not [q["sql"] for q in queries if "pipelines_" in q["sql"]]
    assert Pipeline.objects.count() == 0


@pytest.mark.django_db  # no worker, no commit needed: the test's transaction is enough
def test_a_step_the_reconciler_dead_letters_fails_the_pipeline(alice_client, settings):
    from datetime import timedelta

    from django.utils import timezone

    from jobs.services import job_claim, job_recover

    settings.LLM_MAX_ATTEMPTS = 1  # the lost attempt was the last one: recovered into the DLQ
    pipeline = create_pipeline(alice_client, three_steps())
    first = pipeline.steps.get(index=0).job
    job_claim(job_id=str(first.id))
    recovered = job_recover(job_id=first.id, stale_before=timezone.now() + timedelta(seconds=1))
    assert recovered is not None and recovered.status == "failed"
    body = detail(alice_client, pipeline)
    assert body["status"] == "failed"
    assert statuses(body) == ["failed", "cancelled", "cancelled"]
    assert body["steps"][0]["error"]["code"] == "worker_lost"


@pytest.mark.django_db  # no worker, no commit needed: the test's transaction is enough
def test_a_step_job_read_without_its_metadata_still_moves_its_pipeline(alice_client):
    from jobs.services import job_cancel
    from pipelines.services import _in_a_pipeline

    pipeline = create_pipeline(alice_client, three_steps())
    job = LlmJob.objects.defer(*LlmJob.REQUEST_FIELDS).get(pipeline_step__pipeline=pipeline)
    # The step's unique index answers; the marker is not read (that would load the column).
    assert _in_a_pipeline(job) and "metadata" not in job.__dict__
    job_cancel(job=job)
    pipeline.refresh_from_db()
    assert pipeline.status == "cancelled"
