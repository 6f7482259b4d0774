"""The provider circuit breaker: an account-wide failure (401, 403, the spend cap, "credit balance
is too low") stops dispatch instead of dead-lettering the backlog one job at a time. Real RQ
workers, the fake provider over HTTP, the real admin, real alert receivers."""

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from alerts.models import Alert
from dlq.models import FailureRecord
from jobs.breaker import breaker_close, breaker_gate
from jobs.models import LlmJob, ProviderBreaker
from jobs.reconciler import reconcile_jobs
from jobs.runner import failure_from_outcome
from jobs.services import job_attempt_failed, job_claim
from providers.base import ProviderOutcome
from tests.alerts import conftest as alert_fixtures
from tests.alerts.conftest import ROUTING_KEY
from tests.conftest import make_user, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

# The alert fixtures (a real alerts worker, routes, a PagerDuty receiver), borrowed by name.
alert_settings = alert_fixtures.alert_settings
alert_worker = alert_fixtures.alert_worker
pagerduty = alert_fixtures.pagerduty
route = alert_fixtures.route

CHANGELIST = "/admin/jobs/providerbreaker/"
BACKLOG = 20

ACCOUNT_WIDE = [
    ("401", "authentication_failed", 401),
    ("403", "permission_denied", 403),
    ("spendcap", "spend_cap", 429),
    ("credit", "credit_balance", 400),
]


def storm(alice_client: Any, workers: Any, fake_provider: Any, fault: str, jobs: int) -> list:
    """Submit ``jobs`` jobs while every call fails with ``fault``, and drain the llm queue."""
    fake_provider.faults({fault: 1.0})
    submitted = [submit(alice_client) for _ in range(jobs)]
    workers.drain()
    return submitted


def held(jobs: list) -> list[LlmJob]:
    return list(LlmJob.objects.filter(id__in=[j.id for j in jobs], status="queued"))


def the_breaker() -> ProviderBreaker:
    return ProviderBreaker.objects.get(provider="anthropic")


def staff_client(username: str, *perms: str) -> Client:
    client = Client()
    client.force_login(make_user(username, *perms, is_staff=True))
    return client


def close_from_the_admin(client: Client, breaker: ProviderBreaker) -> Any:
    return client.post(
        CHANGELIST, {"action": "close_breaker", "_selected_action": [breaker.pk]}, follow=True
    )


@pytest.fixture
def pager(route, pagerduty):
    route("CRITICAL", "pagerduty", ROUTING_KEY)
    return pagerduty


@pytest.mark.parametrize("fault,reason,status", ACCOUNT_WIDE, ids=[f[0] for f in ACCOUNT_WIDE])
def test_an_account_wide_failure_opens_the_breaker_and_the_backlog_waits(
    alice_client, workers, fake_provider, alert_worker, pager, fault, reason, status
):
    jobs = storm(alice_client, workers, fake_provider, fault, BACKLOG)

    (failure,) = FailureRecord.objects.all()
    assert failure.severity == "CRITICAL" and failure.reason_code == reason
    assert failure.http_status == status and not failure.retries_exhausted
    assert failure.job.status == "failed" and failure.job.attempts == 1
    breaker = the_breaker()
    assert breaker.state == "open" and breaker.reason_code == reason
    assert breaker.opened_by_job_id == failure.job_id and breaker.next_probe_at is not None
    waiting = held(jobs)
    assert len(waiting) == BACKLOG - 1
    assert all(job.attempts == 0 for job in waiting)
    assert fake_provider.stats()["requests"] == 1
    assert workers.queue.count == 0 and workers.scheduled() == []

    alert_worker.drain()
    (alert,) = Alert.objects.all()
    assert alert.severity == "CRITICAL" and alert.failure_id == failure.id
    (page,) = pager.bodies
    assert page["payload"]["severity"] == "critical"
    assert reason in page["payload"]["summary"]


def test_closing_the_breaker_from_the_admin_runs_the_held_jobs_at_once(
    alice_client, workers, fake_provider, settings
):
    # The reconciler would wait this long before enqueueing a lost job; closing must not.
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 3600
    jobs = storm(alice_client, workers, fake_provider, "401", BACKLOG)
    breaker = the_breaker()
    assert breaker.is_open
    fake_provider.reset()  # a new key is in place

    olga = make_user("olga", "view_providerbreaker", "close_providerbreaker", is_staff=True)
    client = Client()
    client.force_login(olga)
    response = close_from_the_admin(client, breaker)
    assert response.status_code == 200
    assert "Closed 1 breaker(s)" in response.content.decode()

    breaker.refresh_from_db()
    assert breaker.state == "closed" and breaker.closed_by == olga
    assert breaker.close_reason == "closed from the admin" and breaker.next_probe_at is None
    assert workers.queue.count == BACKLOG - 1  # enqueued by the close, not by the reconciler
    workers.drain()
    statuses = [job.status for job in LlmJob.objects.filter(id__in=[j.id for j in jobs])]
    assert statuses.count("completed") == BACKLOG - 1 and statuses.count("failed") == 1
    assert fake_provider.stats()["requests"] == BACKLOG - 1
    assert LlmJob.objects.filter(status="completed", attempts=1).count() == BACKLOG - 1


def test_a_401_answered_before_staff_closed_the_breaker_does_not_open_it_again(
    alice_client, workers, fake_provider
):
    """The race the chaos drill met on a loaded machine: a worker held a 401 answered under the
    old key, staff fixed the key and closed the breaker, and only then was the 401 recorded.
    It dead-letters its own job; the breaker stays closed for the jobs the close let go. A 401
    answered after the close opens it again."""
    storm(alice_client, workers, fake_provider, "401", 2)
    fake_provider.reset()
    answered_before = timezone.now()
    assert breaker_close(reason="key fixed")
    late, fresh = submit(alice_client), submit(alice_client)
    for job in (late, fresh):
        job_claim(job_id=str(job.id))
    denied = ProviderOutcome(
        kind="error_response",
        latency_ms=300,
        http_status=401,
        error_type="authentication_error",
        message="invalid x-api-key",
    )

    job_attempt_failed(
        job_id=late.id,
        attempt=1,
        failure=failure_from_outcome(denied, answered_at=answered_before),
    )
    late.refresh_from_db()
    assert late.status == "failed" and late.error_code == "authentication_failed"
    assert FailureRecord.objects.filter(job=late).exists()
    assert not the_breaker().is_open

    job_attempt_failed(
        job_id=fresh.id,
        attempt=1,
        failure=failure_from_outcome(denied, answered_at=timezone.now()),
    )
    breaker = the_breaker()
    assert breaker.is_open and breaker.opened_by_job_id == fresh.id


def test_staff_without_the_permission_cannot_close_the_breaker(
    alice_client, workers, fake_provider
):
    storm(alice_client, workers, fake_provider, "403", 3)
    breaker = the_breaker()
    viewer = staff_client("vera", "view_providerbreaker")
    page = viewer.get(CHANGELIST)
    assert page.status_code == 200 and b"close_breaker" not in page.content
    close_from_the_admin(viewer, breaker)
    assert the_breaker().is_open

    closer = staff_client("olga", "view_providerbreaker", "close_providerbreaker")
    page = closer.get(CHANGELIST)
    assert page.status_code == 200 and b"close_breaker" in page.content


def test_the_admin_list_of_breakers_answers(alice_client, workers, fake_provider):
    client = staff_client("olga", "view_providerbreaker", "close_providerbreaker")
    assert client.get(CHANGELIST).status_code == 200  # no breaker yet
    storm(alice_client, workers, fake_provider, "credit", 2)
    page = client.get(CHANGELIST)
    assert page.status_code == 200
    assert b"credit_balance" in page.content and b"Open" in page.content
    close_from_the_admin(client, the_breaker())
    page = client.get(CHANGELIST)
    assert page.status_code == 200 and b"Closed" in page.content
    assert client.get(f"{CHANGELIST}{the_breaker().pk}/change/").status_code == 200


@pytest.fixture
def probing(settings):
    # Probes are made due by hand (make_probe_due); the next one stays far enough away that a
    # slow drain does not reach it.
    settings.LLM_BREAKER_PROBE_SECONDS = 10
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0


def make_probe_due() -> None:
    ProviderBreaker.objects.filter(provider="anthropic").update(
        next_probe_at=timezone.now() - timedelta(seconds=1)
    )


def test_a_probe_call_that_succeeds_closes_the_breaker(
    alice_client, workers, fake_provider, probing
):
    jobs = storm(alice_client, workers, fake_provider, "401", 6)
    fake_provider.reset()

    # Not due yet: nothing goes out.
    ProviderBreaker.objects.update(next_probe_at=timezone.now() + timedelta(seconds=60))
    report = reconcile_jobs()
    assert report.held_by_breaker and not report.changed and workers.queue.count == 0

    make_probe_due()
    report = reconcile_jobs()
    assert report.held_by_breaker and report.requeued_lost == 1
    assert workers.queue.count == 1  # exactly one held job: the probe
    workers.work_once()  # the probe succeeds and the close enqueues the rest

    breaker = the_breaker()
    assert breaker.state == "closed" and breaker.probes == 1
    assert breaker.close_reason.startswith("probe call succeeded")
    workers.drain()
    assert len(held(jobs)) == 0
    assert LlmJob.objects.filter(status="completed").count() == 5
    assert fake_provider.stats()["requests"] == 5


def test_a_failing_probe_keeps_the_breaker_open_and_fails_only_itself(
    alice_client, workers, fake_provider, alert_worker, pager, probing
):
    jobs = storm(alice_client, workers, fake_provider, "401", 6)
    alert_worker.drain()
    assert len(pager.bodies) == 1

    make_probe_due()
    assert reconcile_jobs().requeued_lost == 1
    workers.drain()

    breaker = the_breaker()
    assert breaker.is_open and breaker.probes == 1
    assert breaker.next_probe_at > timezone.now()
    assert FailureRecord.objects.count() == 2
    assert LlmJob.objects.filter(status="failed").count() == 2
    assert len(held(jobs)) == 4
    assert fake_provider.stats()["requests"] == 2
    # Another probe is not due yet: a second pass sends nothing.
    assert reconcile_jobs().requeued_lost == 0 and workers.queue.count == 0

    alert_worker.drain()
    # The probe's failure folds into the incident already paged: still one page.
    assert len(pager.bodies) == 1
    assert Alert.objects.count() == 1


def test_only_one_caller_wins_a_due_probe(alice_client, workers, fake_provider, probing):
    storm(alice_client, workers, fake_provider, "401", 2)
    make_probe_due()
    assert [breaker_gate() for _ in range(3)] == ["probe", "open", "open"]


def test_with_the_breaker_disabled_a_401_storm_dead_letters_every_job(
    alice_client, workers, fake_provider, no_breaker
):
    storm(alice_client, workers, fake_provider, "401", BACKLOG)
    assert LlmJob.objects.filter(status="failed").count() == BACKLOG
    assert FailureRecord.objects.filter(reason_code="authentication_failed").count() == BACKLOG
    assert fake_provider.stats()["requests"] == BACKLOG
    assert not ProviderBreaker.objects.filter(state="open").exists()


def test_requeuing_the_job_that_opened_the_breaker_closes_it(
    alice_client, workers, fake_provider, settings
):
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 3600
    jobs = storm(alice_client, workers, fake_provider, "spendcap", 5)
    (failure,) = FailureRecord.objects.all()
    fake_provider.reset()  # the cap was raised

    staff = make_user("olga", "requeue_failurerecord", is_staff=True)
    api = APIClient()
    api.force_authenticate(staff)
    response = api.post(f"/api/v1/failures/{failure.id}/requeue/")
    assert response.status_code == 200 and response.json()["requeued"] is True

    breaker = the_breaker()
    assert breaker.state == "closed" and "requeued" in breaker.close_reason
    # The requeued job and the four it held, each once, under the RQ job id its row names: no
    # stray copy of the requeued job beside them.
    rq_job_ids = set(LlmJob.objects.filter(status="queued").values_list("rq_job_id", flat=True))
    assert sorted(workers.queue.get_job_ids()) == sorted(rq_job_ids) and len(rq_job_ids) == 5
    workers.drain()
    assert LlmJob.objects.filter(id__in=[j.id for j in jobs], status="completed").count() == 5
    assert fake_provider.stats()["requests"] == 5
