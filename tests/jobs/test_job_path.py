"""End to end: API -> real Redis -> real RQ worker -> the fake provider over HTTP -> ledger."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from dlq.models import FailureRecord
from jobs.models import LlmJob
from ledger.models import CostEntry
from ledger.pricing import attempt_cost
from ledger.selectors import price_for_model
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def poll(client, job):
    return client.get(f"/api/v1/jobs/{job.id}/").json()


def entries(job):
    return list(CostEntry.objects.filter(job=job).order_by("attempt"))


def test_a_job_completes_with_output_usage_and_exact_cost(alice_client, workers, fake_provider):
    job = submit(alice_client, system="Answer in one word.")
    workers.drain()
    body = poll(alice_client, job)
    assert body["status"] == "completed"
    assert body["attempts"] == 1
    assert body["output"]["text"] and body["output"]["stop_reason"] == "end_turn"
    usage = body["usage"]
    assert usage["input_tokens"] > 0 and 0 < usage["output_tokens"] <= 256
    (entry,) = entries(job)
    assert entry.outcome == "success" and not entry.is_estimated and entry.request_id
    price = price_for_model(model="claude-sonnet-4-6")
    expected = attempt_cost(
        price, {"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"]}
    )
    assert entry.cost_usd == expected > 0
    assert Decimal(body["cost_usd"]) == expected
    assert body["duration_ms"] is not None and body["completed_at"]
    # The fake provider billed exactly what the ledger holds.
    assert Decimal(fake_provider.stats()["billed"]["cost_usd"]) == expected


def test_cache_write_and_read_are_priced_at_their_rates(alice_client, workers):
    prefix = "You are a careful classifier. " * 40
    messages = [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": prefix,
                    "cache_control": {"type": "ephemeral", "ttl": "1h"},
                },
                {"type": "text", "text": "Ticket: refund please"},
            ],
        }
    ]
    first = submit(alice_client, messages=messages)
    workers.drain()
    second = submit(alice_client, messages=messages)
    workers.drain()
    (write,) = entries(first)
    (read,) = entries(second)
    assert write.cache_write_1h_tokens > 0 and write.cache_read_tokens == 0
    assert read.cache_read_tokens == write.cache_write_1h_tokens and read.cache_write_1h_tokens == 0
    price = price_for_model(model="claude-sonnet-4-6")
    for entry in (write, read):
        usage = {
            k: getattr(entry, k)
            for k in ("input_tokens", "output_tokens", "cache_write_5m_tokens",
                      "cache_write_1h_tokens", "cache_read_tokens")
        }  # fmt: skip
        assert entry.cost_usd == attempt_cost(price, usage)
    assert read.cost_usd < write.cost_usd
    body = alice_client.get(f"/api/v1/jobs/{second.id}/").json()
    assert body["usage"]["cache_read_input_tokens"] == read.cache_read_tokens


TRANSIENT = [
    ("429", "rate_limited", 429),
    ("529", "overloaded", 529),
    ("500", "server_error", 500),
    ("502", "server_error", 502),
    ("503", "server_error", 503),
    ("504", "server_error", 504),
    ("409", "conflict", 409),
]


@pytest.mark.parametrize("fault,reason,status", TRANSIENT)
def test_transient_errors_are_retried_then_succeed(
    alice_client, workers, fake_provider, fault, reason, status
):
    fake_provider.faults({fault: 1.0})
    job = submit(alice_client)
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "retrying" and job.next_attempt_at is not None
    assert job.error_code == reason and job.error_http_status == status
    assert len(workers.scheduled()) == 1
    body = poll(alice_client, job)
    assert body["status"] == "retrying" and body["error"]["code"] == reason
    fake_provider.reset()
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    first, second = entries(job)
    assert (first.outcome, first.http_status, first.cost_usd) == ("error_response", status, 0)
    assert first.reason_code == reason and first.retry_delay_seconds is not None
    assert second.outcome == "success"
    assert job.cost_usd == second.cost_usd
    assert poll(alice_client, job)["error"] is None


@pytest.mark.parametrize(
    "fault,reason,attempts",
    [("429", "rate_limited", 6), ("529", "overloaded", 4), ("503", "server_error", 4)],
)
def test_an_exhausted_schedule_dead_letters_with_error_severity(
    alice_client, workers, fake_provider, fault, reason, attempts
):
    fake_provider.faults({fault: 1.0})
    job = submit(alice_client)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == attempts
    record = FailureRecord.objects.get(job=job)
    assert record.severity == "ERROR" and record.reason_code == reason
    assert record.retries_exhausted and record.attempts == attempts
    assert record.request_snapshot["messages"] == job.messages
    assert len(entries(job)) == attempts
    assert poll(alice_client, job)["error"]["severity"] == "ERROR"


FATAL = [
    ("400", "invalid_request", 400, "ERROR"),
    ("404", "not_found", 404, "ERROR"),
    ("context", "context_too_long", 400, "WARNING"),
    ("413", "request_too_large", 413, "WARNING"),
    ("usagelimit", "usage_limit", 400, "WARNING"),
    ("401", "authentication_failed", 401, "CRITICAL"),
    ("403", "permission_denied", 403, "CRITICAL"),
    ("spendcap", "spend_cap", 429, "CRITICAL"),
]


@pytest.mark.parametrize("fault,reason,status,severity", FATAL)
def test_fatal_errors_dead_letter_at_once_with_their_severity(
    alice_client, workers, fake_provider, settings, fault, reason, status, severity
):
    settings.ANTHROPIC_API_KEY = "sk-ant-secret-never-stored"
    fake_provider.faults({fault: 1.0})
    job = submit(alice_client)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 1
    record = FailureRecord.objects.get(job=job)
    assert (record.reason_code, record.http_status, record.severity) == (reason, status, severity)
    assert not record.retries_exhausted
    assert record.request_id.startswith("req_") and record.error_type
    assert record.message
    body = poll(alice_client, job)
    assert body["error"] == {
        "code": reason,
        "http_status": status,
        "message": record.message,
        "severity": severity,
    }
    # The key never reaches the database.
    for row in (record.request_snapshot, record.message, job.messages):
        assert "sk-ant-secret" not in str(row)
    assert fake_provider.stats()["requests"] == 1


def test_a_read_timeout_is_an_unknown_outcome_with_an_estimated_cost(
    alice_client, workers, fake_provider, settings
):
    settings.LLM_STREAM_IDLE_SECONDS = 0.5
    fake_provider.faults({"timeout": 1.0})
    job = submit(alice_client)
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "retrying" and job.error_code == "read_timeout"
    (entry,) = entries(job)
    assert entry.outcome == "unknown_outcome" and entry.is_estimated
    # An upper bound: at least max_tokens at the output rate.
    assert entry.cost_usd >= Decimal(256) * Decimal(15) / Decimal(1_000_000)
    assert job.cost_usd == entry.cost_usd
    fake_provider.reset()
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed"
    assert job.cost_usd == sum(e.cost_usd for e in entries(job))


def test_a_connection_dropped_mid_response_is_an_unknown_outcome(
    alice_client, workers, fake_provider
):
    fake_provider.faults({"drop": 1.0})
    job = submit(alice_client)
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "retrying" and job.error_code == "connection_dropped"
    (entry,) = entries(job)
    assert entry.outcome == "unknown_outcome" and entry.is_estimated and entry.cost_usd > 0
    assert fake_provider.stats()["dropped"] == 1


def test_a_refused_connection_is_retried_and_costs_nothing(alice_client, workers, settings):
    settings.ANTHROPIC_BASE_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    job = submit(alice_client)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 4
    assert {e.outcome for e in entries(job)} == {"connection_error"}
    assert job.cost_usd == 0
    record = FailureRecord.objects.get(job=job)
    assert record.reason_code == "connection_error" and record.retries_exhausted


def test_retry_after_from_the_provider_is_honoured(alice_client, workers, fake_provider, settings):
    settings.LLM_RETRY_DELAY_SCALE = 0.001
    # The retry policy alone: the shared rate limiter would learn rpm=1 from the first answer
    # and hold the second job instead of sending it (tests/ratelimits/).
    settings.LLM_RATE_LIMIT_ENABLED = False
    fake_provider.faults({}, rpm=1)
    first = submit(alice_client)
    second = submit(alice_client)
    workers.work_once()
    statuses = {j.id: j.status for j in LlmJob.objects.all()}
    assert sorted(statuses.values()) == ["completed", "retrying"]
    limited = LlmJob.objects.get(status="retrying", id__in=[first.id, second.id])
    (entry,) = entries(limited)
    assert entry.http_status == 429
    # The fake's window frees a slot in up to 60 s; the compressed 2 s step must not win.
    assert entry.retry_delay_seconds >= 1
    wait = (limited.next_attempt_at - timezone.now()).total_seconds()
    assert wait > 0.5


def test_delays_follow_the_schedule_with_jitter(alice_client, workers, fake_provider, settings):
    settings.LLM_RETRY_DELAY_SCALE = 1.0
    fake_provider.faults({"529": 1.0})
    job = submit(alice_client)
    before = timezone.now()
    workers.work_once()
    job.refresh_from_db()
    delay = (job.next_attempt_at - before).total_seconds()
    assert 15 - 1 <= delay <= 15 * 1.3 + 1
    (scheduled,) = workers.scheduled()
    when = workers.queue.scheduled_job_registry.get_scheduled_time(scheduled)
    assert abs((when - job.next_attempt_at).total_seconds()) < 1.5


def test_the_global_attempt_cap_dead_letters(alice_client, workers, fake_provider, settings):
    settings.LLM_MAX_ATTEMPTS = 2
    fake_provider.faults({"429": 1.0})
    job = submit(alice_client)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 2
    assert FailureRecord.objects.get(job=job).retries_exhausted


def test_a_cancelled_job_never_calls_the_provider(alice_client, workers, fake_provider):
    job = submit(alice_client)
    assert alice_client.post(f"/api/v1/jobs/{job.id}/cancel/").status_code == 200
    workers.drain()
    job.refresh_from_db()
    assert job.status == "cancelled" and job.attempts == 0
    assert fake_provider.stats()["requests"] == 0
    assert entries(job) == []


def test_a_retrying_job_can_be_cancelled_and_stops(alice_client, workers, fake_provider):
    fake_provider.faults({"529": 1.0})
    job = submit(alice_client)
    workers.work_once()
    assert alice_client.post(f"/api/v1/jobs/{job.id}/cancel/").status_code == 200
    fake_provider.reset()
    workers.drain()
    job.refresh_from_db()
    assert job.status == "cancelled" and job.attempts == 1
    assert fake_provider.stats()["requests"] == 0


def test_a_second_copy_of_a_job_exits_without_calling_the_provider(
    alice_client, workers, fake_provider
):
    from jobs.runner import job_run
    from llmops.queues import job_lock_key

    job = submit(alice_client)
    workers.queue.connection.set(job_lock_key(job.id), "another-worker", ex=30)
    assert job_run(job_id=str(job.id)) == "locked"
    job.refresh_from_db()
    assert job.status == "queued" and job.attempts == 0
    assert fake_provider.stats()["requests"] == 0


def test_the_rq_job_a_job_was_handed_to_waits_for_the_copy_before_it_to_let_go(
    alice_client, workers, fake_provider
):
    # A copy held the job for a paced slot (or scheduled its retry) and is still finishing its
    # own bookkeeping, lock in hand, when the next RQ job starts: that RQ job runs the job once
    # the lock is let go. It used to leave, and nothing was left to run the job.
    import threading

    from jobs.runner import job_run
    from llmops.queues import job_lock_key

    job = submit(alice_client)
    job.refresh_from_db()
    assert job.rq_job_id
    redis = workers.queue.connection
    redis.set(job_lock_key(job.id), "the-copy-that-held-it", ex=30)
    threading.Timer(1.0, redis.delete, args=[job_lock_key(job.id)]).start()
    assert job_run(job_id=str(job.id), rq_job_id=job.rq_job_id) == "success"
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    assert fake_provider.stats()["requests"] == 1


def test_a_copy_the_row_does_not_point_at_or_a_live_attempts_lock_is_not_waited_for(
    alice_client, workers, fake_provider, monkeypatch
):
    import time

    from jobs import runner
    from llmops.queues import job_lock_key

    monkeypatch.setattr(runner, "LOCK_HANDOVER_SECONDS", 1.0)
    job = submit(alice_client)
    job.refresh_from_db()
    workers.queue.connection.set(job_lock_key(job.id), "a-live-attempt", ex=30)
    started = time.monotonic()
    assert runner.job_run(job_id=str(job.id), rq_job_id="a-stray-copy") == "locked"
    assert time.monotonic() - started < 0.5
    # The row's own RQ job waits for the hand-over, and a lock still held after it is a live
    # attempt's: it leaves without a call.
    assert runner.job_run(job_id=str(job.id), rq_job_id=job.rq_job_id) == "locked"
    assert time.monotonic() - started >= 0.8  # the wait, less one of the lock's 0.1 s polls
    job.refresh_from_db()
    assert job.status == "queued" and job.attempts == 0
    assert fake_provider.stats()["requests"] == 0


def test_a_completed_job_is_never_run_again(alice_client, workers, fake_provider):
    job = submit(alice_client)
    workers.drain()
    workers.queue.enqueue("jobs.tasks.run_llm_job", str(job.id))
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    assert fake_provider.stats()["requests"] == 1


def test_requeue_from_the_dlq_gives_a_fresh_budget_and_runs_once(
    alice_client, workers, fake_provider
):
    from dlq.services import failure_requeue

    fake_provider.faults({"529": 1.0})
    job = submit(alice_client)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 4
    record = FailureRecord.objects.get(job=job)
    fake_provider.reset()
    assert failure_requeue(record=record) is True
    assert failure_requeue(record=record) is False
    job.refresh_from_db()
    assert job.status == "queued" and job.budget_attempts == 0 and job.retry_counts == {}
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 5
    assert fake_provider.stats()["requests"] == 1
    record.refresh_from_db()
    assert record.state == "requeued"


def test_a_requeued_job_can_be_retried_on_the_full_schedule_again(
    alice_client, workers, fake_provider
):
    from dlq.services import failure_requeue

    fake_provider.faults({"529": 1.0})
    job = submit(alice_client)
    workers.drain()
    failure_requeue(record=FailureRecord.objects.get(job=job))
    workers.drain()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 8
    assert FailureRecord.objects.filter(job=job).count() == 2


def test_jobs_of_different_users_run_side_by_side(alice_client, bob_client, workers):
    a = submit(alice_client)
    b = submit(bob_client)
    workers.drain()
    assert poll(alice_client, a)["status"] == "completed"
    assert poll(bob_client, b)["status"] == "completed"
    assert alice_client.get(f"/api/v1/jobs/{b.id}/").status_code == 404


def test_running_jobs_show_in_the_status(alice_client, workers, fake_provider):
    job = submit(alice_client)
    LlmJob.objects.filter(id=job.id).update(status="running", started_at=timezone.now())
    assert poll(alice_client, job)["status"] == "running"
    assert timedelta(0) <= timezone.now() - LlmJob.objects.get(id=job.id).started_at


def test_an_attempt_is_priced_at_the_rate_in_force_when_it_ran(
    alice_client, workers, fake_provider
):
    from ledger.models import ModelPrice

    fake_provider.faults({"529": 1.0})
    job = submit(alice_client)
    workers.work_once()
    old = price_for_model(model="claude-sonnet-4-6")
    ModelPrice.objects.create(
        model="claude-sonnet-4-6",
        effective_from=timezone.now(),
        input_per_mtok=Decimal("30"),
        output_per_mtok=Decimal("150"),
        cache_write_5m_per_mtok=Decimal("37.5"),
        cache_write_1h_per_mtok=Decimal("60"),
        cache_read_per_mtok=Decimal("3"),
        max_output_tokens=64_000,
    )
    fake_provider.reset()
    workers.drain()
    success = entries(job)[-1]
    assert success.price.input_per_mtok == Decimal("30") and success.price != old
    usage = {"input_tokens": success.input_tokens, "output_tokens": success.output_tokens}
    assert success.cost_usd == attempt_cost(success.price, usage)
