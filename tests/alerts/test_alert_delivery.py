"""Alerts end to end: dead-lettered jobs -> the alerts queue -> real HTTP receivers and mail."""

import io
import threading
from datetime import timedelta

import pytest
import redis
from django.core import mail
from django.db import OperationalError, connection
from django.utils import timezone

from alerts.dispatch import alert_delivery_attempt
from alerts.models import Alert, AlertDelivery, AlertFingerprint
from alerts.notifications import alert_raise_for_failure
from dlq.models import FailureRecord
from tests.alerts.conftest import ROUTING_KEY, SLACK_PATH, WEBHOOK_PATH, dead_letter
from tests.conftest import submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]

STORM_FINGERPRINT = "failure:CRITICAL:authentication_failed:email-classify:claude-sonnet-4-6"


def test_a_401_storm_pages_once_and_the_next_alert_counts_the_folded_ones(
    alice_client, workers, fake_provider, alert_worker, route, pagerduty, slack
):
    route("CRITICAL", "pagerduty", ROUTING_KEY)
    route("CRITICAL", "slack", slack.url(SLACK_PATH))
    fake_provider.faults({"401": 1.0})
    for _ in range(30):
        submit(alice_client)
    workers.drain()
    assert FailureRecord.objects.filter(reason_code="authentication_failed").count() == 30
    alert_worker.drain()

    (page,) = pagerduty.bodies
    assert page["routing_key"] == ROUTING_KEY
    assert page["event_action"] == "trigger"
    assert page["dedup_key"] == f"llmops:{STORM_FINGERPRINT}"
    assert page["payload"]["severity"] == "critical"
    assert page["payload"]["source"] == "llmops"
    summary = page["payload"]["summary"]
    assert summary.startswith("[CRITICAL] authentication_failed: email-classify on claude-sonnet")
    assert "similar" not in summary
    (chat,) = slack.bodies
    assert chat["text"].startswith("[CRITICAL] authentication_failed") and chat["blocks"]
    assert pagerduty.requests[0]["path"] == "/v2/enqueue"
    assert slack.requests[0]["path"] == SLACK_PATH

    (alert,) = Alert.objects.all()
    assert alert.state == "delivered" and alert.attempts == 2
    assert alert.repeat_count == 29 and alert.folded_count == 0
    first_sent = AlertFingerprint.objects.get(fingerprint=STORM_FINGERPRINT).last_sent_at
    assert AlertFingerprint.objects.get(fingerprint=STORM_FINGERPRINT).folded_count == 29

    # The window passes; the next failure of the same kind is sent and says what was folded.
    AlertFingerprint.objects.filter(fingerprint=STORM_FINGERPRINT).update(
        last_sent_at=first_sent - timedelta(seconds=601)
    )
    since = timezone.localtime(first_sent - timedelta(seconds=601)).strftime("%H:%M")
    submit(alice_client)
    workers.drain()
    alert_worker.drain()
    assert len(pagerduty.bodies) == 2
    follow_up = pagerduty.bodies[1]
    assert follow_up["dedup_key"] == page["dedup_key"]
    assert follow_up["payload"]["summary"].endswith(f"(+29 similar since {since})")
    assert follow_up["payload"]["custom_details"]["folded_count"] == 29
    assert "+29 similar" in slack.bodies[1]["text"]
    latest = Alert.objects.order_by("-id").first()
    assert latest.folded_count == 29 and "29 similar since" in latest.body
    assert Alert.objects.count() == 2


def test_a_context_too_long_failure_goes_to_the_warning_route_only(
    alice_client, workers, fake_provider, alert_worker, route, pagerduty, slack, webhook
):
    route("WARNING", "webhook", webhook.url(WEBHOOK_PATH))
    route("ERROR", "slack", slack.url(SLACK_PATH))
    route("CRITICAL", "pagerduty", ROUTING_KEY)
    fake_provider.faults({"context": 1.0})
    job = submit(alice_client)
    workers.drain()
    alert_worker.drain()
    (body,) = webhook.bodies
    assert body["severity"] == "WARNING" and body["status"] == "firing"
    assert body["fingerprint"] == "failure:WARNING:context_too_long:email-classify:" + job.model
    assert body["details"]["job_id"] == str(job.id) and body["details"]["http_status"] == 400
    assert slack.bodies == [] and pagerduty.bodies == []


def test_a_failing_destination_is_retried_on_schedule_then_failed_without_blocking_the_other(
    alice_client, alert_worker, route, slack, webhook
):
    route("ERROR", "webhook", webhook.url(WEBHOOK_PATH))
    route("ERROR", "slack", slack.url(SLACK_PATH))
    webhook.status = 500
    dead_letter(submit(alice_client), severity="ERROR", reason_code="server_error")

    alert_worker.work_once()
    delays = []
    while scheduled := alert_worker.scheduled_with_delays():
        ((_, delay),) = scheduled
        delays.append(delay)
        alert_worker.release_scheduled()
        alert_worker.work_once()
    # The scheduled registry keeps whole seconds, and the delay is read only after the burst
    # worker has finished (seconds later on a loaded machine): never late, at most a little early.
    assert len(delays) == 3
    for delay, expected in zip(delays, [5, 30, 120], strict=True):
        assert expected - 5 <= delay <= expected + 1.5, delays

    (alert,) = Alert.objects.all()
    failed = AlertDelivery.objects.get(alert=alert, kind="webhook")
    delivered = AlertDelivery.objects.get(alert=alert, kind="slack")
    assert len(webhook.bodies) == 4
    assert (failed.state, failed.attempts, failed.delivered_at) == ("failed", 4, None)
    assert failed.last_error == "HTTP 500: internal error"
    assert [h["ok"] for h in failed.history] == [False] * 4
    assert (delivered.state, delivered.attempts) == ("delivered", 1)
    assert delivered.delivered_at is not None and len(slack.bodies) == 1
    assert alert.state == "partial" and alert.attempts == 5
    assert alert.last_error == "webhook 127.0.0.1/…: HTTP 500: internal error"


def test_a_destination_answering_a_client_error_is_not_retried(
    alice_client, alert_worker, route, webhook
):
    route("ERROR", "webhook", webhook.url(WEBHOOK_PATH))
    webhook.status = 404
    dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    alert_worker.drain()
    delivery = AlertDelivery.objects.get()
    assert (delivery.state, delivery.attempts) == ("failed", 1)
    assert Alert.objects.get().state == "failed"


def test_email_goes_through_djangos_mail_backend(alice_client, alert_worker, route):
    route("ERROR", "email", "ops@example.com, oncall@example.com")
    job = submit(alice_client)
    dead_letter(job, severity="ERROR", reason_code="invalid_request", http_status=400)
    alert_worker.drain()
    (message,) = mail.outbox
    assert message.to == ["ops@example.com", "oncall@example.com"]
    assert message.subject == "[ERROR] invalid_request: email-classify on claude-sonnet-4-6"
    assert str(job.id) in message.body and "HTTP status: 400" in message.body
    assert AlertDelivery.objects.get().state == "delivered"


def test_a_second_copy_of_a_delivery_job_sends_nothing(alice_client, alert_worker, route, slack):
    route("ERROR", "slack", slack.url(SLACK_PATH))
    record = dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    alert_raise_for_failure(failure=record)
    delivery = AlertDelivery.objects.get()
    assert alert_delivery_attempt(delivery_id=delivery.id, attempt=1) == "delivered"
    assert alert_delivery_attempt(delivery_id=delivery.id, attempt=1) == "skipped"
    assert len(slack.bodies) == 1


def test_concurrent_workers_agree_on_one_alert_per_fingerprint(alice_client, route, slack):
    route("CRITICAL", "slack", slack.url(SLACK_PATH))
    job = submit(alice_client)
    records = [
        dead_letter(job, severity="CRITICAL", reason_code="permission_denied") for _ in range(8)
    ]
    start = threading.Barrier(len(records))
    results: list[object] = []
    errors: list[BaseException] = []

    def raise_alert(record: FailureRecord) -> None:
        try:
            start.wait()
            results.append(alert_raise_for_failure(failure=record))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=raise_alert, args=(r,)) for r in records]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert sum(r is not None for r in results) == 1
    (alert,) = Alert.objects.all()
    assert alert.repeat_count == 7
    assert AlertFingerprint.objects.get(fingerprint=alert.fingerprint).folded_count == 7
    assert AlertDelivery.objects.count() == 1


def test_a_delivery_whose_rq_job_redis_lost_is_resumed_by_the_monitor(
    alice_client, alert_worker, route, slack
):
    from django.core.management import call_command

    route("ERROR", "slack", slack.url(SLACK_PATH))
    record = dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    alert_raise_for_failure(failure=record)
    alert_worker.queue.connection.flushdb()  # a Redis flush or failover loses the queued job
    alert_worker.drain()
    assert slack.bodies == []
    AlertDelivery.objects.update(next_attempt_at=timezone.now() - timedelta(minutes=10))

    out = io.StringIO()
    call_command("monitor_queues", stdout=out)
    assert "resumed 1 alert deliveries" in out.getvalue()
    call_command("monitor_queues", stdout=io.StringIO())  # resumed once, not on every pass
    alert_worker.drain()
    assert len(slack.bodies) == 1
    delivery = AlertDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.next_attempt_at) == ("delivered", 1, None)


def _monitor() -> str:
    from django.core.management import call_command

    out = io.StringIO()
    call_command("monitor_queues", stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("lost", ["redis_flushed_after_commit", "redis_down_at_commit"])
def test_a_failure_whose_alert_job_redis_lost_is_alerted_by_the_monitor_once(
    lost, monkeypatch, alice_client, alert_worker, route, slack
):
    route("ERROR", "slack", slack.url(SLACK_PATH))
    if lost == "redis_down_at_commit":

        def redis_down(**kwargs: object) -> None:
            raise redis.exceptions.ConnectionError("Connection refused")

        monkeypatch.setattr("alerts.notifications.failure_alert_enqueue", redis_down)
    record = dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    if lost == "redis_flushed_after_commit":
        alert_worker.queue.connection.flushdb()
    monkeypatch.undo()
    alert_worker.drain()
    assert slack.bodies == [] and Alert.objects.count() == 0

    # Within the grace the alert may merely be late: the monitor waits.
    assert "failure alerts lost from Redis, enqueued again: 0" in _monitor()
    FailureRecord.objects.filter(id=record.id).update(
        created_at=timezone.now() - timedelta(minutes=3)
    )
    assert "failure alerts lost from Redis, enqueued again: 1" in _monitor()
    # Its job now waits in Redis: a second pass adds no copy.
    assert "failure alerts lost from Redis, enqueued again: 0" in _monitor()
    alert_worker.drain()
    assert len(slack.bodies) == 1
    (alert,) = Alert.objects.all()
    assert alert.failure_id == record.id
    record.refresh_from_db()
    assert record.alerted_at is not None

    assert "failure alerts lost from Redis, enqueued again: 0" in _monitor()
    alert_worker.drain()
    assert len(slack.bodies) == 1 and Alert.objects.count() == 1


def test_an_alert_job_that_failed_is_run_again_by_the_monitor(
    monkeypatch, alice_client, alert_worker, route, slack
):
    route("ERROR", "slack", slack.url(SLACK_PATH))

    def database_blip(**kwargs: object) -> None:
        raise OperationalError("Lost connection to server during query")

    monkeypatch.setattr("alerts.tasks.alert_raise_for_failure", database_blip)
    record = dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    alert_worker.drain()
    assert alert_worker.queue.failed_job_registry.count == 1
    monkeypatch.undo()
    FailureRecord.objects.filter(id=record.id).update(
        created_at=timezone.now() - timedelta(minutes=3)
    )
    assert "failure alerts lost from Redis, enqueued again: 1" in _monitor()
    alert_worker.drain()
    assert len(slack.bodies) == 1
    assert alert_worker.queue.failed_job_registry.count == 0


def test_a_duplicate_alert_task_counts_the_failure_once(alice_client, route, slack):
    route("ERROR", "slack", slack.url(SLACK_PATH))
    first = dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    second = dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    alert = alert_raise_for_failure(failure=first)
    assert alert is not None
    assert alert_raise_for_failure(failure=first) is None
    assert alert_raise_for_failure(failure=second) is None  # folded
    assert alert_raise_for_failure(failure=second) is None  # a copy: not folded twice
    alert.refresh_from_db()
    assert alert.repeat_count == 1
    assert AlertFingerprint.objects.get(fingerprint=alert.fingerprint).folded_count == 1
    assert FailureRecord.objects.filter(alerted_at__isnull=True).count() == 0
