"""The batches admin: progress bars, links to a batch's jobs and to its dead letters in the DLQ
console, the callback shown redacted, and the cancel action with its permission."""

import pytest
from django.test import Client

from batches.models import Batch
from dlq.services import failure_record_create
from jobs.models import LlmJob
from tests.batches.helpers import item, submit_batch
from tests.conftest import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(
        make_user("sam", "view_batch", "view_batchitem", "view_failurerecord", is_staff=True)
    )
    return client


def test_the_list_shows_each_batch_with_its_progress(staff_client, alice_client):
    batch = submit_batch(alice_client, [item("a"), item("b"), item("a")], name="nightly")
    Batch.objects.filter(id=batch.id).update(completed=2, pending=1)
    page = staff_client.get("/admin/batches/batch/").content.decode()
    assert "nightly" in page
    assert '<progress class="batch-progress" value="2" max="3">66%</progress>' in page
    assert f"/admin/batches/batchitem/?batch__id__exact={batch.id}&amp;runs_job__exact=1" in page
    assert f"/admin/dlq/failurerecord/?batch={batch.id}" in page


def test_the_batch_page_shows_the_callback_redacted(staff_client, alice_client, settings):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = False
    url = "https://hooks.example.com/b/T000/s3cret?token=s3cret"
    batch = submit_batch(alice_client, [item()], callback_url=url)
    page = staff_client.get(f"/admin/batches/batch/{batch.id}/change/").content.decode()
    assert "hooks.example.com/…" in page
    assert "s3cret" not in page
    assert "sent when the batch finishes" in page


def test_its_items_and_jobs_are_listed_and_filtered_by_job_status(staff_client, alice_client):
    batch = submit_batch(alice_client, [item("a"), item("b"), item("a")])
    other = submit_batch(alice_client, [item("c")])
    base = f"/admin/batches/batchitem/?batch__id__exact={batch.id}"
    page = staff_client.get(base).content.decode()
    jobs = LlmJob.objects.filter(batch_items__batch=batch).distinct()
    for job in jobs:
        assert f"/admin/jobs/llmjob/{job.id}/change/" in page
    assert "3 batch items" in page
    assert str(other.id) not in page.replace(str(batch.id), "")
    failed_only = staff_client.get(base + "&job__status__exact=failed")
    assert failed_only.status_code == 200 and "0 batch items" in failed_only.content.decode()


def test_the_dlq_console_filters_one_batchs_dead_letters(staff_client, alice_client):
    batch = submit_batch(alice_client, [item("a"), item("b")])
    other = submit_batch(alice_client, [item("c")])
    mine = LlmJob.objects.filter(batch_items__batch=batch).first()
    theirs = LlmJob.objects.get(batch_items__batch=other)
    for job in (mine, theirs):
        failure_record_create(job=job, severity="ERROR", reason_code="invalid_request")
    page = staff_client.get(f"/admin/dlq/failurerecord/?batch={batch.id}").content.decode()
    assert str(mine.id) in page and str(theirs.id) not in page
    nothing = staff_client.get("/admin/dlq/failurerecord/?batch=not-a-uuid").content.decode()
    assert str(mine.id) not in nothing
    everything = staff_client.get("/admin/dlq/failurerecord/").content.decode()
    assert str(mine.id) in everything and str(theirs.id) in everything


def test_cancel_needs_its_permission(alice_client):
    batch = submit_batch(alice_client, [item("a"), item("b")])
    action = {"action": "cancel_batches", "_selected_action": [str(batch.id)]}
    viewer = Client()
    viewer.force_login(make_user("viv", "view_batch", is_staff=True))
    assert "cancel_batches" not in viewer.get("/admin/batches/batch/").content.decode()
    viewer.post("/admin/batches/batch/", action)
    assert Batch.objects.get(id=batch.id).status == "running"

    canceller = Client()
    canceller.force_login(make_user("cat", "view_batch", "cancel_batch", is_staff=True))
    response = canceller.post("/admin/batches/batch/", action, follow=True)
    assert "Cancelled 1 batch(es)" in response.content.decode()
    assert Batch.objects.get(id=batch.id).status == "cancelled"
