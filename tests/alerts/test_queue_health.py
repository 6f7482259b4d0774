"""Queue health: a WARNING when a queue's oldest job waits too long, a resolve when it clears."""

import io
import time

import django_rq
import pytest
from django.core.management import call_command

from alerts.checks import queue_clear_ratio_problems
from alerts.models import Alert, AlertDelivery
from loops.queue_health import oldest_wait_seconds, queue_wait_alert_update
from tests.alerts.conftest import ROUTING_KEY, SLACK_PATH, WEBHOOK_PATH
from tests.conftest import submit
from tests.test_deploy_settings import settings_in, start_up_error

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def monitor() -> str:
    out = io.StringIO()
    call_command("monitor_queues", stdout=out)
    return out.getvalue()


def test_a_long_wait_warns_once_and_resolves_when_the_queue_drains(
    settings, alice_client, workers, alert_worker, route, pagerduty, slack, webhook
):
    settings.ALERT_QUEUE_WAIT_THRESHOLDS = {"llm": 1}
    route("WARNING", "pagerduty", ROUTING_KEY)
    route("WARNING", "slack", slack.url(SLACK_PATH))
    route("WARNING", "webhook", webhook.url(WEBHOOK_PATH))
    route("CRITICAL", "slack", slack.url("/critical"))
    submit(alice_client)
    assert "llm: 1 waiting" in monitor()
    assert Alert.objects.count() == 0

    time.sleep(1.2)
    assert "sent trigger alert" in monitor()
    assert "sent" not in monitor()  # still over the threshold: no repeat
    (alert,) = Alert.objects.all()
    assert (alert.severity, alert.fingerprint, alert.action) == (
        "WARNING",
        "queue_wait:llm",
        "trigger",
    )
    alert_worker.drain()
    (trigger,) = pagerduty.bodies
    assert trigger["routing_key"] == ROUTING_KEY and trigger["event_action"] == "trigger"
    assert trigger["dedup_key"] == "llmops:queue_wait:llm"
    assert trigger["payload"]["severity"] == "warning"
    assert trigger["payload"]["summary"].startswith("[WARNING] Queue llm: oldest job waiting")
    assert trigger["payload"]["custom_details"]["threshold_seconds"] == 1
    assert [r["path"] for r in slack.requests] == [SLACK_PATH]

    workers.drain()
    assert "sent resolve alert" in monitor()
    assert "sent" not in monitor()
    alert_worker.drain()
    resolve = pagerduty.bodies[1]
    assert resolve["event_action"] == "resolve"
    assert resolve["dedup_key"] == trigger["dedup_key"] and resolve["routing_key"] == ROUTING_KEY
    assert slack.bodies[1]["text"].startswith("[WARNING] Cleared: queue llm")
    assert [b["status"] for b in webhook.bodies] == ["firing", "resolved"]
    assert len(pagerduty.bodies) == 2 and Alert.objects.count() == 2
    assert set(AlertDelivery.objects.values_list("state", flat=True)) == {"delivered"}


def test_the_resolve_goes_where_the_trigger_went(route, slack, webhook):
    old = route("WARNING", "slack", slack.url(SLACK_PATH))
    trigger = queue_wait_alert_update(
        queue_name="llm", oldest_wait_seconds=90.0, threshold_seconds=60
    )
    assert trigger is not None and trigger.action == "trigger"
    old.enabled = False
    old.save()
    route("WARNING", "webhook", webhook.url(WEBHOOK_PATH))
    assert (
        queue_wait_alert_update(queue_name="llm", oldest_wait_seconds=120.0, threshold_seconds=60)
        is None
    )
    resolve = queue_wait_alert_update(
        queue_name="llm", oldest_wait_seconds=None, threshold_seconds=60
    )
    assert resolve is not None and resolve.action == "resolve"
    assert [d.target for d in resolve.deliveries.all()] == [slack.url(SLACK_PATH)]


def test_the_oldest_wait_comes_from_the_head_of_the_rq_queue():
    assert oldest_wait_seconds(queue_name="default") == (0, None)
    queue = django_rq.get_queue("default")
    first = queue.enqueue("alerts.tasks.deliver_alert", 0)
    time.sleep(0.2)
    queue.enqueue("alerts.tasks.deliver_alert", 0)
    waiting, wait = oldest_wait_seconds(queue_name="default")
    assert waiting == 2 and 0.2 <= wait < 5
    # An id whose job hash is gone is skipped, as a worker would.
    first.delete(remove_from_queue=False)
    waiting, wait = oldest_wait_seconds(queue_name="default")
    assert waiting == 2 and wait < 0.2


def test_a_wait_hovering_at_the_threshold_does_not_flap(settings, route, slack):
    settings.ALERT_QUEUE_CLEAR_RATIO = 0.5
    route("WARNING", "slack", slack.url(SLACK_PATH))

    def update(wait: float | None) -> str:
        alert = queue_wait_alert_update(
            queue_name="llm", oldest_wait_seconds=wait, threshold_seconds=60
        )
        return alert.action if alert else "-"

    # Over the threshold it triggers; it resolves only under half of it, or once nothing waits.
    waits = [59.0, 61.0, 59.0, 61.0, 45.0, 61.0, 30.0, 29.9, 59.0, 61.0, 40.0, None, None]
    assert [update(w) for w in waits] == [
        "-", "trigger", "-", "-", "-", "-", "-", "resolve", "-", "trigger", "-", "resolve", "-",
    ]  # fmt: skip
    resolve = Alert.objects.filter(action="resolve").order_by("id").first()
    assert resolve.title == "Cleared: queue llm is back under 30s"
    assert resolve.details["clear_below_seconds"] == 30


def test_a_clear_ratio_of_one_resolves_as_soon_as_the_wait_is_back_under(settings, route, slack):
    settings.ALERT_QUEUE_CLEAR_RATIO = 1.0
    route("WARNING", "slack", slack.url(SLACK_PATH))
    assert queue_wait_alert_update(queue_name="llm", oldest_wait_seconds=61, threshold_seconds=60)
    resolve = queue_wait_alert_update(
        queue_name="llm", oldest_wait_seconds=59.5, threshold_seconds=60
    )
    assert resolve is not None and resolve.action == "resolve"


@pytest.mark.parametrize("ratio", [0.0, -0.5, 1.5, float("nan")])
def test_a_clear_ratio_outside_0_to_1_stops_start_up(ratio):
    [problem] = queue_clear_ratio_problems(ratio)
    assert problem.startswith("ALERT_QUEUE_CLEAR_RATIO must be over 0 and at most 1")


def test_the_clear_ratio_defaults_to_half_and_may_be_1():
    assert settings_in({}, "ALERT_QUEUE_CLEAR_RATIO") == {"ALERT_QUEUE_CLEAR_RATIO": 0.5}
    assert queue_clear_ratio_problems(0.5) == queue_clear_ratio_problems(1.0) == []
    assert "must be a number, not 'half'" in start_up_error({"ALERT_QUEUE_CLEAR_RATIO": "half"})
