"""Routing: admin rows first, settings defaults for a severity without rows; secrets stay secret."""

import json
import logging
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.test import Client

from alerts.checks import alert_route_problems
from alerts.destinations import Destination, destinations_for
from alerts.models import Alert, AlertDelivery, AlertRoute
from alerts.notifications import alert_raise
from alerts.targets import redact_target
from tests.alerts.conftest import ROUTING_KEY, SLACK_PATH, WEBHOOK_PATH, dead_letter
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_settings_defaults_are_used_for_a_severity_without_route_rows(
    settings, alice_client, alert_worker, route, webhook, slack
):
    settings.ALERT_ROUTES = {"ERROR": [{"kind": "webhook", "target": webhook.url(WEBHOOK_PATH)}]}
    route("WARNING", "slack", slack.url(SLACK_PATH))  # rows for another severity do not count
    assert destinations_for(severity="ERROR") == [
        Destination("webhook", webhook.url(WEBHOOK_PATH), None)
    ]
    assert destinations_for(severity="CRITICAL") == []
    dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    alert_worker.drain()
    assert len(webhook.bodies) == 1 and slack.bodies == []
    assert AlertDelivery.objects.get().route is None


def test_rows_of_a_severity_replace_the_defaults_and_disabled_rows_are_skipped(
    settings, alice_client, alert_worker, route, webhook, slack, pagerduty
):
    settings.ALERT_ROUTES = {"ERROR": [{"kind": "webhook", "target": webhook.url(WEBHOOK_PATH)}]}
    chat = route("ERROR", "slack", slack.url(SLACK_PATH))
    route("ERROR", "pagerduty", ROUTING_KEY, enabled=False)
    assert destinations_for(severity="ERROR") == [Destination("slack", chat.target, chat.id)]
    dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    alert_worker.drain()
    assert len(slack.bodies) == 1
    assert webhook.bodies == [] and pagerduty.bodies == []


def test_a_severity_whose_rows_are_all_disabled_is_silenced(
    settings, alice_client, alert_worker, route, webhook
):
    settings.ALERT_ROUTES = {"ERROR": [{"kind": "webhook", "target": webhook.url(WEBHOOK_PATH)}]}
    route("ERROR", "webhook", webhook.url(WEBHOOK_PATH), enabled=False)
    dead_letter(submit(alice_client), severity="ERROR", reason_code="not_found")
    alert_worker.drain()
    assert webhook.bodies == []
    assert Alert.objects.get().state == "unrouted"


def test_secrets_never_reach_logs_or_stored_errors(
    settings, caplog, alice_client, alert_worker, route, slack, pagerduty
):
    caplog.set_level(logging.DEBUG)
    settings.ALERT_RETRY_SCHEDULE = [0.0]
    slack.status = 500
    pagerduty.status = 503
    route("CRITICAL", "slack", slack.url(SLACK_PATH))
    route("CRITICAL", "pagerduty", ROUTING_KEY)
    route("CRITICAL", "webhook", f"http://127.0.0.1:9{WEBHOOK_PATH}?token=qs-secret-5678")
    dead_letter(submit(alice_client), severity="CRITICAL", reason_code="authentication_failed")
    alert_worker.drain()

    deliveries = list(AlertDelivery.objects.all())
    assert {d.state for d in deliveries} == {"failed"} and {d.attempts for d in deliveries} == {2}
    alert = Alert.objects.get()
    stored = [alert.last_error, str(alert.destinations), *(str(d.history) for d in deliveries)]
    stored += [d.last_error for d in deliveries] + [str(d) for d in deliveries]
    for secret in (SLACK_PATH, "slacksecret", ROUTING_KEY, WEBHOOK_PATH, "qs-secret"):
        assert secret not in caplog.text
        assert not any(secret in text for text in stored)
    # Redacted, the destinations are still recognisable.
    assert "failed for good" in caplog.text and "…9f3a" in caplog.text
    assert "127.0.0.1/…" in caplog.text
    assert {d.last_error.split(":")[0] for d in deliveries} == {
        "HTTP 500",
        "HTTP 503",
        "ConnectError",
    }


def test_redaction_keeps_the_host_or_the_last_four_characters():
    assert redact_target(kind="slack", target=f"https://hooks.slack.com{SLACK_PATH}") == (
        "hooks.slack.com/…"
    )
    assert redact_target(kind="pagerduty", target=ROUTING_KEY) == "…9f3a"
    assert redact_target(kind="email", target="ops@example.com") == "ops@example.com"


def test_alert_routes_setting_is_checked_at_start_up(settings):
    good = {
        "CRITICAL": [{"kind": "pagerduty", "target": f" {ROUTING_KEY} "}],
        "WARNING": [{"kind": "email", "target": "a@example.com,b@example.com", "name": "ops"}],
    }
    assert alert_route_problems(good) == []
    settings.ALERT_ROUTES = good
    assert destinations_for(severity="CRITICAL") == [Destination("pagerduty", ROUTING_KEY, None)]
    bad = {
        '{"SEVERE": []}': "unknown severity 'SEVERE'",
        '{"ERROR": [{"kind": "sms", "target": "+100"}]}': "unknown kind 'sms'",
        '{"ERROR": {"kind": "slack"}}': "must be a list",
        '{"ERROR": [{"kind": "slack", "target": ""}]}': "non-empty",
        '{"ERROR": [{"kind": "slack", "target": "hooks.slack.com/T0SECRET"}]}': "http(s) URL",
        '{"ERROR": [{"kind": "email", "target": "nobody"}]}': "addresses",
        '["ERROR"]': "keyed by severity",
    }
    for raw, problem in bad.items():
        problems = alert_route_problems(json.loads(raw))
        assert len(problems) == 1 and re.search(re.escape(problem), problems[0]), problems
        assert "T0SECRET" not in problems[0]


def test_a_route_with_a_bad_target_is_refused_without_echoing_it():
    route = AlertRoute(severity="ERROR", kind="slack", target="hooks.slack.com/T0SECRET")
    with pytest.raises(ValidationError) as exc:
        route.full_clean()
    assert "http(s) URL" in str(exc.value) and "T0SECRET" not in str(exc.value)
    AlertRoute(severity="ERROR", kind="pagerduty", target=ROUTING_KEY).full_clean()


@pytest.fixture
def admin_client_(db):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def _alerts(n: int) -> None:
    for i in range(n):
        alert_raise(
            fingerprint=f"test:{i}", severity="ERROR", title=f"t{i}", body="b", source="test"
        )


def test_the_admin_lists_routes_redacted_and_alerts_with_a_fixed_number_of_queries(
    admin_client_, route, slack, django_assert_max_num_queries
):
    chat = route("ERROR", "slack", slack.url(SLACK_PATH))
    route("ERROR", "pagerduty", ROUTING_KEY)
    page = admin_client_.get("/admin/alerts/alertroute/")
    assert page.status_code == 200
    assert b"127.0.0.1/" in page.content and b"9f3a" in page.content
    assert SLACK_PATH.encode() not in page.content and ROUTING_KEY.encode() not in page.content
    form = admin_client_.get(f"/admin/alerts/alertroute/{chat.id}/change/")
    assert form.status_code == 200

    _alerts(1)
    with django_assert_max_num_queries(50) as few:
        assert admin_client_.get("/admin/alerts/alert/").status_code == 200
    _alerts(10)
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = admin_client_.get("/admin/alerts/alert/")
    assert page.status_code == 200 and b"slack pending" in page.content
    alert = Alert.objects.first()
    detail = admin_client_.get(f"/admin/alerts/alert/{alert.id}/change/")
    assert detail.status_code == 200 and b"127.0.0.1/" in detail.content
    assert SLACK_PATH.encode() not in detail.content


def test_staff_switch_a_route_off_from_the_list(admin_client_, route, slack):
    chat = route("ERROR", "slack", slack.url(SLACK_PATH))
    response = admin_client_.post(
        "/admin/alerts/alertroute/",
        {
            "form-TOTAL_FORMS": "1",
            "form-INITIAL_FORMS": "1",
            "form-0-id": str(chat.id),
            "_save": "Save",
        },
    )
    assert response.status_code == 302
    chat.refresh_from_db()
    assert chat.enabled is False
