"""A pipeline's deadline and tags: on every step's job, validated up front, and no step starts
after the deadline (real workers, the fake provider, MariaDB and Redis)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import LlmJob
from pipelines.models import Pipeline
from tests.pipelines.helpers import create_pipeline, detail, step, work_one

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_every_steps_job_carries_the_pipelines_deadline_and_tags(alice_client, workers):
    pipeline = create_pipeline(
        alice_client,
        [step("Draft"), step("Shorten: {{previous}}", tags=["short"])],
        deadline_seconds=600,
        tags=["Refunds"],
    )
    assert pipeline.tags == ["refunds"] and pipeline.deadline is not None
    workers.drain()
    jobs = list(LlmJob.objects.order_by("created_at"))
    assert [job.tags for job in jobs] == [["refunds"], ["refunds", "short"]]
    assert {job.deadline for job in jobs} == {pipeline.deadline}
    body = detail(alice_client, pipeline)
    assert body["status"] == "completed" and body["tags"] == ["refunds"]


def test_no_step_starts_after_the_pipelines_deadline(alice_client, fake_provider):
    pipeline = create_pipeline(
        alice_client, [step("Draft"), step("Next: {{previous}}")], deadline_seconds=600
    )
    # The pipeline's deadline passes while its first step runs (that job keeps its own).
    Pipeline.objects.filter(id=pipeline.id).update(deadline=timezone.now() - timedelta(seconds=1))
    work_one()
    body = detail(alice_client, pipeline)
    assert body["status"] == "failed"
    first, second = body["steps"]
    assert first["status"] == "completed"
    assert second["job_id"] is None and second["error"]["code"] == "deadline_exceeded"
    assert LlmJob.objects.count() == 1 and fake_provider.stats()["requests"] == 1


@pytest.mark.parametrize(
    "fields,code",
    [
        ({"deadline": "2020-01-01T00:00:00Z"}, "invalid_deadline"),
        ({"tags": ["a b"]}, "invalid_tags"),
    ],
)
def test_a_bad_pipeline_deadline_or_tags_is_refused(alice_client, fields, code):
    response = alice_client.post(
        "/api/v1/pipelines/", {"steps": [step("Draft")], **fields}, format="json"
    )
    assert response.status_code == 400 and response.json()["code"] == code
    assert not Pipeline.objects.exists() and not LlmJob.objects.exists()


def test_a_step_may_not_give_its_own_deadline_when_the_pipeline_has_one(alice_client):
    response = alice_client.post(
        "/api/v1/pipelines/",
        {"steps": [step("Draft", deadline_seconds=30)], "deadline_seconds": 60},
        format="json",
    )
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_steps"
    assert body["detail"]["errors"][0]["code"] == "invalid_deadline"
