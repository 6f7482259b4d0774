"""Batches on the real stack: `manage.py rqworker` processes as the Procfile runs them (threaded
llm workers; the default and alerts worker for cancels and callbacks), the fake provider over
HTTP, MariaDB and Redis, and a real HTTP receiver for the callback.

- 1,000 items (250 distinct) on two llm worker processes with injected failures and retries:
  the counters equal the items' job statuses, identical items were called once, the batch
  finished once and its callback arrived once.
- Stopping: without allow_failures the first failure cancels the rest (status failed); a
  cancel mid-batch stops every job not yet running (status cancelled).
"""

import time
from decimal import Decimal
from typing import Any

import django_rq
import pytest
from django.db.models import Count, Sum

from batches.models import Batch, BatchItem
from batches.services import batch_cancels_resume
from jobs.models import LlmJob
from ledger.models import CostEntry
from tests.batches.helpers import item, receiver, submit_batch
from tests.conftest import FakeProvider
from tests.jobs.test_takeover import Processes, requests_seen, wait_for, worker_env
from webhooks.models import WebhookDelivery
from webhooks.services import webhooks_resume

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.fixture
def processes(tmp_path: Any) -> Any:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def start_workers(
    processes: Processes, fake_provider: FakeProvider, *, llm: int, concurrency: int
) -> None:
    env = worker_env(
        fake_provider,
        LLM_WORKER_CONCURRENCY=str(concurrency),
        LLM_RETRY_DELAY_SCALE="0.001",
        LLM_RATE_LIMIT_ENABLED="False",
        CALLBACK_ALLOW_PRIVATE_HOSTS="True",
        LOG_LEVEL="WARNING",
    )
    for _ in range(llm):
        processes.start(env, "rqworker", "llm", "--with-scheduler")
    processes.start(env, "rqworker", "default", "alerts", "--with-scheduler")


def finished(batch: Batch, processes: Processes, *, timeout: float) -> Batch:
    try:
        wait_for(
            lambda: Batch.objects.filter(id=batch.id, finished_at__isnull=False).exists(),
            timeout=timeout,
            what="batch to finish",
            every=0.25,
        )
    except AssertionError as unfinished:
        raise AssertionError(
            f"{unfinished}\n{_where_it_stands(batch)}\n{processes.logs()}"
        ) from None
    return Batch.objects.get(id=batch.id)


def _where_it_stands(batch: Batch) -> str:
    """What an unfinished batch's jobs and its RQ jobs were doing (for a timeout's message)."""
    queue = django_rq.get_queue("llm")
    stuck = LlmJob.objects.filter(batch_items__batch=batch, batch_items__runs_job=True).exclude(
        status__in=["completed", "failed", "cancelled"]
    )
    rows = list(stuck.values_list("id", "status", "attempts", "next_attempt_at", "rq_job_id")[:10])
    counters = Batch.objects.filter(id=batch.id).values().first()
    return (
        f"jobs by status: {items_by_job_status(batch)}; not final (first 10): {rows}; "
        f"llm queue {queue.count}, scheduled {queue.scheduled_job_registry.count}, "
        f"started {queue.started_job_registry.count}; "
        f"scheduler lock: {queue.connection.get('rq:scheduler-lock:llm')!r}; batch: {counters}"
    )


def items_by_job_status(batch: Batch) -> dict[str, int]:
    rows = BatchItem.objects.filter(batch=batch).values("job__status").annotate(n=Count("id"))
    return {row["job__status"]: row["n"] for row in rows}


@pytest.mark.long  # 20 s of CPU: make test-long (the other tests here run the same paths small)
def test_a_thousand_items_report_exact_counts_run_duplicates_once_and_call_back_once(
    alice_client, fake_provider, processes, settings
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True  # the receiver listens on 127.0.0.1
    # Fatal 400s dead-letter about 5 % of the jobs; 500s are retried (scaled to milliseconds).
    fake_provider.faults({"400": 0.05, "500": 0.10})
    distinct = [item(f"Summarise ticket {i}: my order is late") for i in range(250)]
    items = distinct * 4  # items 250-999 repeat items 0-249
    with receiver() as hook:
        batch = submit_batch(alice_client, items, callback_url=f"{hook.url}/done?token=s3cret")
        start_workers(processes, fake_provider, llm=2, concurrency=16)
        batch = finished(batch, processes, timeout=180)
        wait_for(lambda: hook.bodies, timeout=30, what=f"the callback\n{processes.logs()}")
        # A monitor pass and more time change nothing: one callback, one finish.
        time.sleep(1.0)
        assert webhooks_resume(grace_seconds=0) == 0
        assert batch_cancels_resume(grace_seconds=0) == 0
        time.sleep(0.5)
        assert len(hook.requests) == 1

    by_status = items_by_job_status(batch)
    assert (batch.total, batch.jobs_total, batch.pending) == (1000, 250, 0)
    assert batch.completed == by_status.get("completed", 0) > 0
    assert batch.failed == by_status.get("failed", 0) > 0
    assert batch.cancelled == 0 and batch.completed + batch.failed == 1000
    assert batch.status == "completed"  # allow_failures: failures count, the batch completes

    # Identical items were called once: every provider request is an attempt of one of the
    # 250 jobs (the 750 repeated items added no job and no call).
    jobs = LlmJob.objects.filter(batch_items__batch=batch, batch_items__runs_job=True)
    assert jobs.count() == 250
    attempts = jobs.aggregate(n=Sum("attempts"))["n"]
    assert requests_seen(fake_provider) == attempts
    assert CostEntry.objects.filter(entry_type="attempt").count() == attempts
    assert attempts > 250  # the 500s were retried

    shown = alice_client.get(f"/api/v1/batches/{batch.id}/").json()
    cost = jobs.aggregate(c=Sum("cost_usd"))["c"]
    assert Decimal(shown["cost_usd"]) == cost > 0
    callback = hook.requests[0]
    assert callback["path"] == "/done?token=s3cret"
    assert callback["headers"]["User-Agent"] == "llmops-callbacks"
    assert callback["body"] == {"type": "batch.finished", "batch": shown}
    delivery = WebhookDelivery.objects.get(subject_kind="batch", subject_id=str(batch.id))
    assert delivery.state == WebhookDelivery.State.DELIVERED and delivery.attempts == 1
    assert "s3cret" not in processes.output()


def test_a_failure_without_allow_failures_cancels_the_rest_and_a_cancel_stops_a_batch(
    alice_client, fake_provider, processes
):
    start_workers(processes, fake_provider, llm=1, concurrency=4)

    # Without allow_failures: every call fails (fatal 400), the first failure stops the batch.
    fake_provider.faults({"400": 1.0}, latency_ms=200)
    strict = submit_batch(
        alice_client, [item(f"strict {i}") for i in range(100)], allow_failures=False
    )
    strict = finished(strict, processes, timeout=60)
    assert strict.status == "failed"
    assert strict.completed == 0 and strict.pending == 0
    # Jobs already running when it stopped end too (failed here); every other one is cancelled.
    assert strict.failed >= 1 and strict.cancelled >= 50
    assert strict.failed + strict.cancelled == 100
    assert strict.failed == items_by_job_status(strict)["failed"]
    assert strict.cancelled == items_by_job_status(strict)["cancelled"]
    assert requests_seen(fake_provider) == strict.failed  # no cancelled job was called
    assert not LlmJob.objects.filter(status="cancelled").exclude(attempts=0).exists()

    # A cancel mid-batch: jobs that had started end, every other one is cancelled.
    fake_provider.reset()
    fake_provider.faults({}, latency_ms=500)
    batch = submit_batch(alice_client, [item(f"slow {i}") for i in range(200)])
    wait_for(
        lambda: Batch.objects.get(id=batch.id).completed >= 4,
        timeout=60,
        what=f"some items to complete\n{processes.logs()}",
    )
    response = alice_client.post(f"/api/v1/batches/{batch.id}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    batch = finished(batch, processes, timeout=60)
    by_status = items_by_job_status(batch)
    assert batch.status == "cancelled" and batch.pending == 0 and batch.failed == 0
    assert batch.completed == by_status["completed"] >= 4
    # Four calls at a time, half a second each: the cancel overtakes nearly all of them.
    assert batch.cancelled == by_status["cancelled"] >= 100
    assert batch.completed + batch.cancelled == 200
    jobs = LlmJob.objects.filter(batch_items__batch=batch)
    assert requests_seen(fake_provider) == jobs.filter(status="completed").count()
    time.sleep(1.0)  # nothing runs after the batch finished
    assert Batch.objects.get(id=batch.id).completed == batch.completed
    assert requests_seen(fake_provider) == batch.completed
