"""Loop health: an ERROR once a loop has not passed for three intervals, a resolve when it does."""

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from alerts.models import Alert, AlertFingerprint, LoopHeartbeat
from loops.loop_health import (
    error_summary,
    loop_error_record,
    loop_health_check,
    loop_pass_record,
    loop_start_record,
    loop_stop_record,
)
from tests.alerts.conftest import ROUTING_KEY, SLACK_PATH, WEBHOOK_PATH

pytestmark = pytest.mark.django_db(transaction=True)


def beat(name: str, *, ago: float, interval: float = 10.0, **extra) -> LoopHeartbeat:
    return LoopHeartbeat.objects.create(
        name=name,
        interval_seconds=interval,
        last_pass_at=timezone.now() - timedelta(seconds=ago),
        host="worker-1:4242",
        **extra,
    )


def sent(reports) -> list[tuple[str, str]]:
    return [(r.name, r.alert.action) for r in reports if r.alert is not None]


def test_a_stalled_loop_alerts_once_and_resolves_when_it_passes_again(
    route, pagerduty, webhook, alert_worker
):
    route("ERROR", "pagerduty", ROUTING_KEY)
    route("ERROR", "webhook", webhook.url(WEBHOOK_PATH))
    beat(
        "reconciler",
        ago=45,
        last_error="ConnectionError: Error 111 connecting to 127.0.0.1:6390.",
        last_error_at=timezone.now(),
    )
    beat("monitor", ago=5)

    assert sent(loop_health_check()) == [("reconciler", "trigger")]
    assert sent(loop_health_check()) == []  # still stalled: nothing more is sent
    (trigger,) = Alert.objects.all()
    assert (trigger.severity, trigger.fingerprint, trigger.source) == (
        "ERROR",
        "loop_stalled:reconciler",
        "loop_health",
    )
    assert trigger.title.startswith("Loop reconciler has not passed for 4")
    assert "worker-1:4242" in trigger.body and "Error 111 connecting" in trigger.body
    assert trigger.details["stalled_after_seconds"] == 30
    alert_worker.drain()
    (paged,) = pagerduty.bodies
    assert paged["event_action"] == "trigger" and paged["payload"]["severity"] == "error"

    loop_pass_record(name="reconciler", interval_seconds=10, host="worker-2:99")
    assert sent(loop_health_check()) == [("reconciler", "resolve")]
    assert sent(loop_health_check()) == []
    resolve = Alert.objects.get(action="resolve")
    assert resolve.title == "Cleared: loop reconciler passes again"
    alert_worker.drain()
    assert [b["event_action"] for b in pagerduty.bodies] == ["trigger", "resolve"]
    assert pagerduty.bodies[1]["dedup_key"] == paged["dedup_key"]
    assert [b["status"] for b in webhook.bodies] == ["firing", "resolved"]


def test_the_resolve_goes_where_the_trigger_went(route, slack, webhook):
    old = route("ERROR", "slack", slack.url(SLACK_PATH))
    beat("monitor", ago=100)
    assert sent(loop_health_check()) == [("monitor", "trigger")]
    old.enabled = False
    old.save()
    route("ERROR", "webhook", webhook.url(WEBHOOK_PATH))
    loop_pass_record(name="monitor", interval_seconds=10, host="h:1")
    (report,) = loop_health_check()
    assert report.alert.action == "resolve"
    assert [d.target for d in report.alert.deliveries.all()] == [slack.url(SLACK_PATH)]


def test_three_intervals_are_the_limit():
    beat("monitor", ago=29, interval=10)
    assert sent(loop_health_check()) == []
    assert sent(loop_health_check(now=timezone.now() + timedelta(seconds=2))) == [
        ("monitor", "trigger")
    ]


def test_a_loop_stopped_on_purpose_is_not_a_stall():
    loop_start_record(name="monitor", interval_seconds=10, host="h:1")
    loop_stop_record(name="monitor", host="h:1")
    later = timezone.now() + timedelta(hours=1)
    (report,) = loop_health_check(now=later)
    assert report.alert is None and str(report) == "monitor: stopped (stalled after 30s)"
    # Started again, then gone without stopping (kill -9): three intervals later it alerts.
    loop_start_record(name="monitor", interval_seconds=10, host="h:2")
    assert sent(loop_health_check(now=timezone.now() + timedelta(seconds=31))) == [
        ("monitor", "trigger")
    ]


def test_a_stopping_process_does_not_blank_the_heartbeat_of_its_successor():
    loop_start_record(name="monitor", interval_seconds=10, host="h:1")
    loop_pass_record(name="monitor", interval_seconds=10, host="h:2")
    loop_stop_record(name="monitor", host="h:1")
    assert LoopHeartbeat.objects.get(name="monitor").last_pass_at is not None


def test_a_loop_that_never_passes_alerts_three_intervals_after_it_started():
    # The database was down at start: the first row written is the error's.
    loop_error_record(
        name="reconciler", interval_seconds=5, host="h:1", error=OperationalError(2006, "gone")
    )
    row = LoopHeartbeat.objects.get(name="reconciler")
    assert row.last_pass_at is not None and row.last_error == "OperationalError: (2006, 'gone')"
    loop_error_record(
        name="reconciler", interval_seconds=5, host="h:1", error=OperationalError(2006, "again")
    )
    assert LoopHeartbeat.objects.get(name="reconciler").last_pass_at == row.last_pass_at
    assert sent(loop_health_check(now=timezone.now() + timedelta(seconds=16))) == [
        ("reconciler", "trigger")
    ]


def test_an_open_alert_of_a_retired_loop_is_resolved():
    beat("old_loop", ago=100)
    assert sent(loop_health_check()) == [("old_loop", "trigger")]
    LoopHeartbeat.objects.filter(name="old_loop").delete()
    assert sent(loop_health_check()) == [("old_loop", "resolve")]
    assert not AlertFingerprint.objects.get(fingerprint="loop_stalled:old_loop").active
    assert sent(loop_health_check()) == []


def test_error_summaries_keep_credentials_out():
    error = OperationalError("cannot connect to redis://:hunter2@cache:6379/0 (password=hunter2)")
    summary = error_summary(error)
    assert "hunter2" not in summary
    assert summary == "OperationalError: cannot connect to redis://***@cache:6379/0 (password=***)"
    assert len(error_summary(ValueError("x" * 5000))) == 500


def test_staff_see_each_loop_and_whether_it_passes_in_the_admin(client, django_user_model):
    beat("reconciler", ago=5, interval=15)
    beat("monitor", ago=600, interval=15, last_error="ConnectionError: Redis is down")
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    page = client.get("/admin/alerts/loopheartbeat/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "reconciler" in html and "monitor" in html
    assert 'alt="True"' in html and 'alt="False"' in html
    monitor = LoopHeartbeat.objects.get(name="monitor")
    detail = client.get(f"/admin/alerts/loopheartbeat/{monitor.id}/change/")
    assert detail.status_code == 200 and "Redis is down" in detail.content.decode()
