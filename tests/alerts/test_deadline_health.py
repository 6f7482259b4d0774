"""Deadline health: a WARNING per feature while fewer than LLM_DEADLINE_ALERT_RATIO of the jobs
whose deadline passed in the last hour completed by it; one resolve once it recovers."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs.models import LlmJob
from loops.deadline_health import deadline_attainment_check
from tests.alerts.conftest import SLACK_PATH
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def _ended(job: LlmJob, *, met: bool, minutes_ago: float = 5) -> None:
    deadline = timezone.now() - timedelta(minutes=minutes_ago)
    LlmJob.objects.filter(id=job.id).update(
        deadline=deadline,
        status=LlmJob.Status.COMPLETED if met else LlmJob.Status.FAILED,
        completed_at=deadline - timedelta(seconds=1) if met else deadline,
    )


def test_a_feature_under_the_ratio_warns_once_and_resolves_when_it_recovers(
    settings, alice_client, route, slack, alert_worker
):
    settings.LLM_DEADLINE_ALERT_RATIO = 0.95
    route("WARNING", "slack", slack.url(SLACK_PATH))
    summarize = [submit(alice_client, feature="summarize", deadline_seconds=60) for _ in range(4)]
    for job in summarize[:3]:
        _ended(job, met=True)
    _ended(summarize[3], met=False)  # 3 of 4: 75 %
    healthy = submit(alice_client, feature="classify", deadline_seconds=60)
    _ended(healthy, met=True)

    report = deadline_attainment_check()
    (alert,) = report.alerts
    assert [row.feature for row in report.below] == ["summarize"]
    assert (alert.severity, alert.fingerprint, alert.source, alert.action) == (
        "WARNING",
        "deadline_attainment:summarize",
        "deadline_health",
        "trigger",
    )
    assert alert.title == "summarize: 75% of jobs met their deadline in the last hour"
    assert alert.details == {
        "feature": "summarize",
        "with_deadline": 4,
        "met": 3,
        "ratio": 0.75,
        "threshold": 0.95,
    }
    assert deadline_attainment_check().alerts == []  # still under: nothing more is sent

    # The missed deadline leaves the hour: the condition ends.
    _ended(summarize[3], met=False, minutes_ago=90)
    (resolve,) = deadline_attainment_check().alerts
    assert (resolve.action, resolve.fingerprint) == ("resolve", "deadline_attainment:summarize")
    assert deadline_attainment_check().alerts == []
    alert_worker.drain()
    assert [b["text"].split(" ", 1)[0] for b in slack.bodies] == ["[WARNING]", "[WARNING]"]


def test_a_feature_at_the_ratio_does_not_warn(settings, alice_client):
    settings.LLM_DEADLINE_ALERT_RATIO = 0.5
    jobs = [submit(alice_client, deadline_seconds=60) for _ in range(2)]
    _ended(jobs[0], met=True)
    _ended(jobs[1], met=False)
    assert deadline_attainment_check().alerts == []
    settings.LLM_DEADLINE_ALERT_RATIO = 0.95
    assert len(deadline_attainment_check().alerts) == 1


def test_the_monitor_pass_reports_deadline_attainment(settings, alice_client):
    job = submit(alice_client, feature="summarize", deadline_seconds=60)
    _ended(job, met=False)
    out = io.StringIO()
    call_command("monitor_queues", stdout=out)
    assert "deadlines: under 0.95 in the last hour: summarize 0/1" in out.getvalue()
