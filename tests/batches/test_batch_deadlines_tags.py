"""A batch's deadline and tags: validated with the batch, shown, applied to every job, and
``?tag=`` in the batch list. (The deadline's rules for a job: tests/jobs/test_deadlines.py.)"""

from datetime import timedelta

import pytest
from django.utils import timezone

from batches.models import Batch
from jobs.models import JobTag, LlmJob
from tests.batches.helpers import batch_body, item, submit_batch

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]


def test_a_batch_with_deadline_seconds_gives_its_jobs_that_deadline(alice_client):
    before = timezone.now()
    batch = submit_batch(
        alice_client, [item("one"), item("two"), item("one")], deadline_seconds=120
    )
    after = timezone.now()
    assert before + timedelta(seconds=120) <= batch.deadline <= after + timedelta(seconds=120)
    jobs = LlmJob.objects.filter(batch_items__batch=batch).distinct()
    assert jobs.count() == 2  # identical items still share one job
    assert {job.deadline for job in jobs} == {batch.deadline}
    body = alice_client.get(f"/api/v1/batches/{batch.id}/").json()
    assert body["deadline"] is not None
    job_body = alice_client.get(f"/api/v1/jobs/{jobs[0].id}/").json()
    assert job_body["deadline"] == body["deadline"]


def test_a_batch_with_tags_tags_its_jobs(alice_client):
    batch = submit_batch(alice_client, [item("one"), item("two")], tags=["Nightly", "eu"])
    assert batch.tags == ["nightly", "eu"]
    jobs = list(LlmJob.objects.filter(batch_items__batch=batch))
    assert all(job.tags == ["nightly", "eu"] for job in jobs)
    assert JobTag.objects.filter(job__in=jobs, tag="nightly").count() == 2
    body = alice_client.get(f"/api/v1/batches/{batch.id}/").json()
    assert body["tags"] == ["nightly", "eu"]
    listed = alice_client.get("/api/v1/jobs/", {"tag": "eu"}).json()["results"]
    assert {row["id"] for row in listed} == {str(job.id) for job in jobs}


@pytest.mark.parametrize(
    "fields,code",
    [
        ({"deadline": "2020-01-01T00:00:00Z"}, "invalid_deadline"),
        ({"deadline": "2999-01-01T00:00:00Z", "deadline_seconds": 30}, "invalid_deadline"),
        ({"deadline_seconds": -1}, "invalid_deadline"),
        ({"tags": ["not a slug"]}, "invalid_tags"),
        ({"tags": [f"t{i}" for i in range(11)]}, "invalid_tags"),
    ],
)
def test_a_bad_deadline_or_tags_refuses_the_batch(alice_client, fields, code):
    response = alice_client.post("/api/v1/batches/", batch_body([item()], **fields), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code
    assert not Batch.objects.exists() and not LlmJob.objects.exists()


def test_an_item_may_not_carry_its_own_deadline(alice_client):
    body = batch_body([item(deadline_seconds=30)])
    response = alice_client.post("/api/v1/batches/", body, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_items"


def test_the_batch_list_filters_by_tag(alice_client, bob_client):
    nightly = submit_batch(alice_client, [item()], tags=["nightly"])
    submit_batch(alice_client, [item()], tags=["adhoc"])
    submit_batch(alice_client, [item()])
    submit_batch(bob_client, [item()], tags=["nightly"])
    rows = alice_client.get("/api/v1/batches/", {"tag": "nightly"}).json()["results"]
    assert [row["id"] for row in rows] == [str(nightly.id)]
    assert rows[0]["tags"] == ["nightly"]
    bad = alice_client.get("/api/v1/batches/", {"tag": "a b"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_filter"
