"""Overdue retries: a WARNING while a retrying job's next attempt is long overdue, read from the
database; a resolve once none is."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from alerts.models import Alert
from jobs.models import LlmJob
from loops.retry_health import retry_overdue_check
from tests.alerts.conftest import SLACK_PATH
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def retrying(job: LlmJob, *, due_ago: float) -> None:
    LlmJob.objects.filter(id=job.id).update(
        status=LlmJob.Status.RETRYING,
        next_attempt_at=timezone.now() - timedelta(seconds=due_ago),
    )


def test_the_oldest_overdue_retry_warns_once_and_resolves_when_none_is_overdue(
    settings, alice_client, route, slack, alert_worker
):
    settings.LLM_OVERDUE_RETRY_ALERT_SECONDS = 120
    route("WARNING", "slack", slack.url(SLACK_PATH))
    late, later, on_time = submit(alice_client), submit(alice_client), submit(alice_client)
    retrying(late, due_ago=200)
    retrying(later, due_ago=500)
    retrying(on_time, due_ago=60)

    report = retry_overdue_check()
    assert report.alert is not None and report.alert.action == "trigger"
    assert report.job_id == str(later.id) and 499 < report.overdue_seconds < 520
    alert = report.alert
    assert (alert.severity, alert.fingerprint, alert.source) == (
        "WARNING",
        "retry_overdue:llm",
        "retry_health",
    )
    assert alert.title.startswith(f"Retry of job {later.id} overdue by 5")
    assert alert.details["job_id"] == str(later.id) and alert.details["threshold_seconds"] == 120
    assert retry_overdue_check().alert is None  # still overdue: nothing more is sent

    # The retries run (or are requeued): one still overdue keeps the alert open.
    LlmJob.objects.filter(id=later.id).update(status=LlmJob.Status.RUNNING)
    report = retry_overdue_check()
    assert report.alert is None and report.job_id == str(late.id)
    LlmJob.objects.filter(id=late.id).update(status=LlmJob.Status.COMPLETED)
    report = retry_overdue_check()
    assert report.alert is not None and report.alert.action == "resolve"
    assert report.alert.title == "Cleared: no retry is overdue"
    assert retry_overdue_check().alert is None
    alert_worker.drain()
    assert [b["text"].split(" ", 1)[0] for b in slack.bodies] == ["[WARNING]", "[WARNING]"]
    assert Alert.objects.count() == 2


def test_each_monitor_pass_checks_for_overdue_retries(settings, alice_client):
    settings.LLM_OVERDUE_RETRY_ALERT_SECONDS = 120
    retrying(submit(alice_client), due_ago=300)
    out = io.StringIO()
    call_command("monitor_queues", stdout=out)
    assert "monitor: retries: retry of job" in out.getvalue()
    assert "sent trigger alert" in out.getvalue()
    assert Alert.objects.get().fingerprint == "retry_overdue:llm"
