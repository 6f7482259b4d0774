"""'Requeue all matching' as a background job: the request only records the selection, a worker on
the default queue requeues it in batches with its progress in the row, and the monitor's sweep
puts back a bulk requeue whose RQ job Redis lost."""

import django_rq
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rq.job import Job

from api.errors import ValidationFailed
from dlq import services
from dlq.models import BulkRequeue, FailureRecord
from dlq.services import (
    bulk_requeue_run,
    bulk_requeue_start,
    bulk_requeues_resume,
    failure_close,
    failure_requeue,
)
from jobs.models import LlmJob
from llmops.queues import DEFAULT_QUEUE, LLM_QUEUE, bulk_requeue_job_id
from tests.conftest import Workers, make_user, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

CHANGELIST = "/admin/dlq/failurerecord/"
MATCHING = "/admin/dlq/failurerecord/requeue-matching/"
BULK_LIST = "/admin/dlq/bulkrequeue/"


def staff(username: str, *perms: str) -> Client:
    user = make_user(username, "view_failurerecord", *perms, is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def dead_jobs(client, workers, fake_provider, count: int, **overrides) -> list[LlmJob]:
    """Jobs dead-lettered the real way: submitted over the API, each refused with a 400 (a fault
    of the request, not of the account, so the provider breaker stays closed)."""
    fake_provider.faults({"400": 1.0})
    jobs = [submit(client, **overrides) for _ in range(count)]
    workers.drain()
    fake_provider.reset()
    return [LlmJob.objects.get(id=j.id) for j in jobs]


def open_records(jobs: list[LlmJob]):
    return FailureRecord.objects.filter(job__in=jobs, state=FailureRecord.State.OPEN)


@pytest.fixture
def default_worker() -> Workers:
    return Workers(queue_name=DEFAULT_QUEUE)


def llm_queue_count() -> int:
    return django_rq.get_queue(LLM_QUEUE).count


def test_it_requeues_the_matching_failures_in_the_background_batch_by_batch_each_job_once(
    alice_client, workers, fake_provider, default_worker, monkeypatch
):
    # Three batches, the last one short: what 250 failures do with the real batch of 200, at
    # an eighth of the provider calls (each failure is made and requeued through real workers).
    monkeypatch.setattr(services, "BULK_REQUEUE_BATCH", 12)
    jobs = dead_jobs(alice_client, workers, fake_provider, 30, feature="storm")
    dead_jobs(alice_client, workers, fake_provider, 2, feature="other")
    operator = staff("olga", "requeue_matching_failurerecord")

    with CaptureQueriesContext(connection) as queries:
        done = operator.post(f"{MATCHING}?job__feature=storm", {"confirm": "yes"})
    assert done.status_code == 302
    # Ids only, in one query: the request does not grow with the selection.
    assert len(queries.captured_queries) < 30
    bulk = BulkRequeue.objects.get()
    assert (bulk.state, bulk.total, bulk.processed, bulk.moved) == ("pending", 30, 0, 0)
    assert bulk.description == "Filter: job__feature=storm"
    assert bulk.created_by.username == "olga"
    assert not LlmJob.objects.filter(status="queued").exists()
    assert default_worker.queue.job_ids == [bulk_requeue_job_id(bulk.id)]

    default_worker.work_once()
    bulk.refresh_from_db()
    assert (bulk.state, bulk.processed, bulk.moved, bulk.skipped) == ("finished", 30, 30, 0)
    assert bulk.percent == 100 and bulk.started_at and bulk.finished_at
    assert set(LlmJob.objects.filter(status="queued").values_list("id", flat=True)) == {
        j.id for j in jobs
    }
    assert llm_queue_count() == 30
    assert set(open_records(jobs).values_list("id", flat=True)) == set()
    assert set(
        FailureRecord.objects.filter(job__in=jobs).values_list("state", "handled_by__username")
    ) == {("requeued", "olga")}
    assert LlmJob.objects.filter(feature="other", status="failed").count() == 2

    # Running the task again, directly or from the queue, moves nothing more.
    assert "nothing to do" in bulk_requeue_run(bulk_id=bulk.id)
    services.bulk_requeue_enqueue(bulk_id=bulk.id)
    default_worker.work_once()
    bulk.refresh_from_db()
    assert (bulk.processed, bulk.moved, bulk.skipped) == (30, 30, 0)
    assert llm_queue_count() == 30

    workers.drain()
    assert LlmJob.objects.filter(feature="storm", status="completed").count() == 30
    assert fake_provider.stats()["requests"] == 30  # each job ran once


def test_a_record_resolved_meanwhile_is_skipped(
    alice_client, workers, fake_provider, default_worker
):
    jobs = dead_jobs(alice_client, workers, fake_provider, 3)
    bulk = bulk_requeue_start(records=FailureRecord.objects.all())
    resolved = FailureRecord.objects.get(job=jobs[1])
    failure_close(record=resolved, comment="fixed by hand")
    default_worker.work_once()
    bulk.refresh_from_db()
    assert (bulk.state, bulk.processed, bulk.moved, bulk.skipped) == ("finished", 3, 2, 1)
    resolved.refresh_from_db()
    assert resolved.state == "resolved"
    assert LlmJob.objects.get(id=jobs[1].id).status == "failed"
    assert LlmJob.objects.filter(status="queued").count() == 2


def test_a_model_change_is_applied_to_every_job(
    alice_client, workers, fake_provider, default_worker
):
    jobs = dead_jobs(alice_client, workers, fake_provider, 2)
    bulk = bulk_requeue_start(records=FailureRecord.objects.all(), model="claude-haiku-4-5")
    assert bulk.model == "claude-haiku-4-5"
    default_worker.work_once()
    for job in jobs:
        job.refresh_from_db()
        assert (job.status, job.model) == ("queued", "claude-haiku-4-5")
    assert set(FailureRecord.objects.values_list("requeued_model", flat=True)) == {
        "claude-haiku-4-5"
    }


def test_an_unknown_model_is_refused_before_anything_is_recorded(
    alice_client, workers, fake_provider, default_worker
):
    dead_jobs(alice_client, workers, fake_provider, 1)
    with pytest.raises(ValidationFailed) as refused:
        bulk_requeue_start(records=FailureRecord.objects.all(), model="gpt-nothing")
    assert refused.value.code == "unknown_model"
    assert not BulkRequeue.objects.exists()
    assert default_worker.queue.count == 0


def test_redis_flushed_after_start_the_sweep_enqueues_it_again(
    alice_client, workers, fake_provider, default_worker
):
    jobs = dead_jobs(alice_client, workers, fake_provider, 3)
    bulk = bulk_requeue_start(records=FailureRecord.objects.all())
    default_worker.queue.connection.flushdb()
    default_worker.work_once()
    bulk.refresh_from_db()
    assert bulk.state == "pending"
    assert bulk_requeues_resume() == 0  # within the grace period: the enqueue may be on its way
    assert bulk_requeues_resume(grace_seconds=0) == 1
    assert bulk_requeues_resume(grace_seconds=0) == 0  # queued now: left alone
    default_worker.work_once()
    bulk.refresh_from_db()
    assert (bulk.state, bulk.moved) == ("finished", 3)
    assert LlmJob.objects.filter(id__in=[j.id for j in jobs], status="queued").count() == 3
    assert bulk_requeues_resume(grace_seconds=0) == 0  # finished: never again


def test_a_run_killed_midway_resumes_from_its_last_progress_write(
    alice_client, workers, fake_provider, default_worker, monkeypatch
):
    monkeypatch.setattr(services, "BULK_REQUEUE_BATCH", 2)
    jobs = dead_jobs(alice_client, workers, fake_provider, 5)
    bulk = bulk_requeue_start(records=FailureRecord.objects.all())
    # A worker killed during its second batch: it requeued three records, wrote progress for two.
    for record_id in bulk.record_ids[:3]:
        failure_requeue(record=FailureRecord.objects.get(id=record_id))
    BulkRequeue.objects.filter(id=bulk.id).update(state="running", processed=2, moved=2)
    Job.fetch(bulk_requeue_job_id(bulk.id), connection=default_worker.queue.connection).delete()

    assert bulk_requeues_resume(grace_seconds=0) == 1
    default_worker.work_once()
    bulk.refresh_from_db()
    # The third record was already requeued: skipped, not run twice.
    assert (bulk.state, bulk.processed, bulk.moved, bulk.skipped) == ("finished", 5, 4, 1)
    assert LlmJob.objects.filter(id__in=[j.id for j in jobs], status="queued").count() == 5
    assert llm_queue_count() == 5


def test_the_progress_page_needs_staff_and_the_permission(
    alice_client, workers, fake_provider, default_worker
):
    dead_jobs(alice_client, workers, fake_provider, 2)
    bulk = bulk_requeue_start(records=FailureRecord.objects.all(), description="Every open one")
    page = f"{BULK_LIST}{bulk.id}/change/"

    starter = staff("olga", "requeue_matching_failurerecord")
    pending = starter.get(page)
    assert pending.status_code == 200
    html = pending.content.decode()
    assert 'data-state="pending"' in html and 'http-equiv="refresh" content="2"' in html
    assert 'value="0" max="2"' in html

    watcher = make_user("wes", "view_bulkrequeue", is_staff=True)
    client = Client()
    client.force_login(watcher)
    assert client.get(page).status_code == 200

    assert staff("vic", "requeue_failurerecord").get(page).status_code == 403
    outsider = make_user("carl", "view_bulkrequeue", "requeue_matching_failurerecord")
    client = Client()
    client.force_login(outsider)
    assert client.get(page).status_code == 302  # not staff: to the admin login

    default_worker.work_once()
    html = starter.get(page).content.decode()
    assert 'data-state="finished"' in html and "http-equiv" not in html
    assert 'value="2" max="2"' in html
    listing = starter.get(BULK_LIST)
    assert listing.status_code == 200
    assert "Every open one" in listing.content.decode()
    assert 'class="bulk-progress"' in listing.content.decode()


def test_the_bulk_requeue_pages_never_load_the_record_ids(
    alice_client, workers, fake_provider, default_worker
):
    dead_jobs(alice_client, workers, fake_provider, 1)
    bulk = bulk_requeue_start(records=FailureRecord.objects.all())
    client = staff("olga", "requeue_matching_failurerecord")
    for url in [BULK_LIST, f"{BULK_LIST}{bulk.id}/change/"]:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(url).status_code == 200
        selects = [q["sql"] for q in queries.captured_queries if "alerts_bulkrequeue" in q["sql"]]
        assert selects
        assert all("record_ids" not in sql for sql in selects), selects


def test_the_confirmation_estimate_reads_no_snapshot(alice_client, workers, fake_provider):
    dead_jobs(alice_client, workers, fake_provider, 3)
    operator = staff("olga", "requeue_matching_failurerecord")
    with CaptureQueriesContext(connection) as queries:
        page = operator.get(MATCHING)
    assert page.status_code == 200
    assert '<strong id="matching-count">3</strong>' in page.content.decode()
    for query in queries.captured_queries:
        assert "request_snapshot" not in query["sql"], query["sql"]
        assert "output_text" not in query["sql"], query["sql"]
