"""The Django admin as the DLQ console: requeue and resolve, permission-gated."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from alerts.models import FailureRecord
from jobs.models import LlmJob
from tests.conftest import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

CHANGELIST = "/admin/alerts/failurerecord/"


def staff(username: str, *perms: str) -> Client:
    user = get_user_model().objects.create_user(username=username, password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="alerts",
            codename__in=["view_failurerecord", "change_failurerecord", *perms],
        )
    )
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def dead_job(alice_client, workers, fake_provider):
    fake_provider.faults({"403": 1.0})
    job = submit(alice_client)
    workers.drain()
    fake_provider.reset()
    return LlmJob.objects.get(id=job.id)


def test_staff_with_the_permission_requeue_from_the_admin(dead_job, workers, fake_provider):
    operator = staff("olga", "requeue_failurerecord")
    record = FailureRecord.objects.get(job=dead_job)
    page = operator.get(CHANGELIST)
    assert page.status_code == 200 and b"permission_denied" in page.content
    assert b"Requeue selected jobs" in page.content
    payload = {"action": "requeue", "_selected_action": [record.pk]}
    response = operator.post(CHANGELIST, payload, follow=True)
    assert response.status_code == 200 and b"Requeued 1 job" in response.content
    again = operator.post(CHANGELIST, payload, follow=True)
    assert b"Requeued 0 job" in again.content
    workers.drain()
    dead_job.refresh_from_db()
    assert dead_job.status == "completed" and dead_job.attempts == 2
    assert fake_provider.stats()["requests"] == 1
    record.refresh_from_db()
    assert record.state == "requeued" and record.handled_by.username == "olga"


def test_the_requeue_action_is_refused_without_the_permission(dead_job):
    viewer = staff("vic")
    record = FailureRecord.objects.get(job=dead_job)
    page = viewer.get(CHANGELIST)
    assert page.status_code == 200 and b"Requeue selected jobs" not in page.content
    viewer.post(CHANGELIST, {"action": "requeue", "_selected_action": [record.pk]})
    dead_job.refresh_from_db()
    assert dead_job.status == "failed"
    record.refresh_from_db()
    assert record.state == "open"


def test_mark_resolved_records_who_and_when(dead_job):
    operator = staff("rita", "resolve_failurerecord")
    record = FailureRecord.objects.get(job=dead_job)
    operator.post(CHANGELIST, {"action": "mark_resolved", "_selected_action": [record.pk]})
    record.refresh_from_db()
    assert record.state == "resolved" and record.handled_by.username == "rita"
    assert record.handled_at is not None


def test_admin_pages_open_without_errors(dead_job, django_assert_max_num_queries):
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)
    record = FailureRecord.objects.get(job=dead_job)
    for url in [
        CHANGELIST,
        f"{CHANGELIST}{record.pk}/change/",
        "/admin/jobs/llmjob/",
        f"/admin/jobs/llmjob/{dead_job.pk}/change/",
        f"/admin/jobs/llmjob/?q={dead_job.pk}",
        "/admin/jobs/llmjob/?q=not-a-uuid",
        "/admin/ledger/costentry/",
        "/admin/ledger/modelprice/",
    ]:
        assert client.get(url).status_code == 200, url
    with django_assert_max_num_queries(12):
        client.get(CHANGELIST)
