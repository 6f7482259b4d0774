"""Failure incidents close when the DLQ is worked: the last open record of a fingerprint leaving
``open`` sends a resolve to where the trigger went."""

import io

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from rest_framework.test import APIClient

from alerts.models import Alert, AlertFingerprint
from alerts.notifications import alert_resolve_failure_if_handled
from dlq.models import FailureRecord
from dlq.services import (
    bulk_requeue_run,
    bulk_requeue_start,
    failure_close,
    failure_requeue,
)
from jobs.models import LlmJob
from keys.testing import api_key_for
from tests.alerts.conftest import ROUTING_KEY, SLACK_PATH, WEBHOOK_PATH, dead_letter
from tests.conftest import submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]

STORM_FINGERPRINT = "failure:CRITICAL:authentication_failed:email-classify:claude-sonnet-4-6"
DEDUP_KEY = f"llmops:{STORM_FINGERPRINT}"


def staff_client(username: str) -> APIClient:
    user = get_user_model().objects.create_user(username=username, is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="dlq",
            codename__in=["view_failurerecord", "resolve_failurerecord"],
        )
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(user)}")
    return client


def monitor() -> str:
    out = io.StringIO()
    call_command("monitor_queues", stdout=out)
    return out.getvalue()


def test_working_the_dlq_of_a_401_storm_resolves_its_page_once_and_a_new_failure_pages_again(
    alice_client, workers, fake_provider, alert_worker, route, pagerduty, slack, webhook
):
    route("CRITICAL", "pagerduty", ROUTING_KEY)
    chat = route("CRITICAL", "slack", slack.url(SLACK_PATH))
    fake_provider.faults({"401": 1.0})
    for _ in range(5):
        submit(alice_client)
    workers.drain()
    alert_worker.drain()
    (trigger,) = pagerduty.bodies
    assert trigger["event_action"] == "trigger" and trigger["dedup_key"] == DEDUP_KEY
    assert AlertFingerprint.objects.get(fingerprint=STORM_FINGERPRINT).active
    # Routes edited after the page: the resolve still goes where the trigger went.
    chat.enabled = False
    chat.save()
    route("CRITICAL", "webhook", webhook.url(WEBHOOK_PATH))

    records = list(FailureRecord.objects.order_by("id"))
    bulk = bulk_requeue_start(
        records=FailureRecord.objects.filter(id__in=[r.id for r in records[:3]])
    )
    bulk_requeue_run(bulk_id=bulk.id)
    bulk.refresh_from_db()
    assert bulk.moved == 3
    response = staff_client("olga").post(
        f"/api/v1/failures/{records[3].id}/resolve/",
        {"state": "resolved", "comment": "key rotated"},
        format="json",
    )
    assert response.status_code == 200, response.content
    alert_worker.drain()
    assert len(pagerduty.bodies) == 1  # one record of the storm is still open: no resolve
    assert AlertFingerprint.objects.get(fingerprint=STORM_FINGERPRINT).active

    failure_close(record=records[4], state=FailureRecord.State.IGNORED, comment="known")
    alert_worker.drain()
    trigger, resolve = pagerduty.bodies
    assert resolve["event_action"] == "resolve"
    assert resolve["dedup_key"] == DEDUP_KEY and resolve["routing_key"] == ROUTING_KEY
    assert resolve["payload"]["summary"] == (
        "[CRITICAL] Cleared: authentication_failed: email-classify on claude-sonnet-4-6"
    )
    assert resolve["payload"]["custom_details"]["folded_count"] == 4
    assert slack.bodies[1]["text"].startswith("[CRITICAL] Cleared: authentication_failed")
    assert webhook.bodies == []
    state = AlertFingerprint.objects.get(fingerprint=STORM_FINGERPRINT)
    assert not state.active and state.folded_count == 0
    # Checked again (a duplicate task, the monitor's sweep): nothing more is sent.
    assert alert_resolve_failure_if_handled(fingerprint=STORM_FINGERPRINT) is None
    assert "failure alerts resolved (DLQ handled): 0" in monitor()
    alert_worker.drain()
    assert len(pagerduty.bodies) == 2

    # The three requeued jobs fail again, within the dedup window: a new incident pages at once.
    workers.drain()
    alert_worker.drain()
    assert FailureRecord.objects.filter(state=FailureRecord.State.OPEN).count() == 3
    assert [b["event_action"] for b in pagerduty.bodies] == ["trigger", "resolve", "trigger"]
    again = pagerduty.bodies[2]
    assert again["dedup_key"] == DEDUP_KEY and "similar" not in again["payload"]["summary"]
    assert [b["status"] for b in webhook.bodies] == ["firing"]  # today's routes for the new one
    assert AlertFingerprint.objects.get(fingerprint=STORM_FINGERPRINT).active
    assert list(Alert.objects.order_by("id").values_list("action", flat=True)) == [
        "trigger",
        "resolve",
        "trigger",
    ]


def test_requeuing_on_another_model_resolves_the_incident_of_the_model_it_failed_on(
    alice_client, alert_worker, route, pagerduty
):
    route("CRITICAL", "pagerduty", ROUTING_KEY)
    record = dead_letter(
        submit(alice_client), severity="CRITICAL", reason_code="authentication_failed"
    )
    alert_worker.drain()
    LlmJob.objects.filter(id=record.job_id).update(status=LlmJob.Status.FAILED)
    assert failure_requeue(record=record, model="claude-haiku-4-5")
    assert LlmJob.objects.get(id=record.job_id).model == "claude-haiku-4-5"
    alert_worker.drain()
    trigger, resolve = pagerduty.bodies
    assert (trigger["event_action"], resolve["event_action"]) == ("trigger", "resolve")
    assert resolve["dedup_key"] == trigger["dedup_key"] == DEDUP_KEY


def test_a_check_that_redis_lost_is_made_up_by_the_monitor(
    alice_client, alert_worker, route, pagerduty
):
    route("ERROR", "pagerduty", ROUTING_KEY)
    record = dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    alert_worker.drain()
    failure_close(record=record)
    alert_worker.queue.connection.flushdb()  # the failure_fingerprint_check job is lost
    alert_worker.drain()
    assert len(pagerduty.bodies) == 1
    assert "failure alerts resolved (DLQ handled): 1" in monitor()
    assert "failure alerts resolved (DLQ handled): 0" in monitor()
    alert_worker.drain()
    assert [b["event_action"] for b in pagerduty.bodies] == ["trigger", "resolve"]


def test_no_resolve_is_sent_for_a_fingerprint_that_never_paged(
    alice_client, alert_worker, route, pagerduty
):
    route("ERROR", "pagerduty", ROUTING_KEY)
    record = dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    # Staff close it before the alerts worker gets to it: nothing pages, nothing resolves.
    failure_close(record=record)
    alert_worker.drain()
    assert pagerduty.bodies == [] and Alert.objects.count() == 0
    record.refresh_from_db()
    assert record.alerted_at is None
    assert "failure alerts resolved (DLQ handled): 0" in monitor()
