"""Staff API for the DLQ: /api/v1/failures/."""

import pytest
from rest_framework.test import APIClient

from dlq.models import FailureRecord
from jobs.models import LlmJob
from keys.testing import api_key_for
from tests.conftest import make_user, submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]

ALL_PERMS = [
    "view_failurerecord",
    "requeue_failurerecord",
    "requeue_other_model_failurerecord",
    "resolve_failurerecord",
    "ignore_failurerecord",
]


def api_client(username: str, *perms: str, is_staff: bool = True) -> APIClient:
    user = make_user(username, *perms, is_staff=is_staff)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(user)}")
    return client


@pytest.fixture
def records(alice_client, workers, fake_provider):
    fake_provider.faults({"401": 1.0})
    critical = [submit(alice_client, feature="alpha") for _ in range(2)]
    workers.drain()
    fake_provider.faults({"context": 1.0})
    warning = submit(alice_client, feature="beta")
    workers.drain()
    fake_provider.reset()
    return {
        "critical": [FailureRecord.objects.get(job=j) for j in critical],
        "warning": FailureRecord.objects.get(job=warning),
    }


@pytest.mark.parametrize("value", ["abc", "²", "4.0"])
def test_a_filter_on_http_status_that_is_no_number_is_refused(value):
    # "²" is a digit to str.isdigit(), not to int(): it once reached the query and raised.
    response = api_client("olga", *ALL_PERMS).get("/api/v1/failures/", {"http_status": value})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"


def test_staff_list_and_filter_failures(records):
    client = api_client("olga", *ALL_PERMS)
    body = client.get("/api/v1/failures/").json()
    assert body["count"] == 3
    first = body["results"][0]
    assert {"id", "severity", "reason_code", "state", "job", "request_id", "message"} <= set(first)
    assert set(first["job"]) >= {"id", "status", "feature", "model", "cost_usd"}
    critical = client.get("/api/v1/failures/?severity=CRITICAL").json()
    assert critical["count"] == 2
    assert {r["reason_code"] for r in critical["results"]} == {"authentication_failed"}
    assert client.get("/api/v1/failures/?feature=beta").json()["count"] == 1
    bad = client.get("/api/v1/failures/?state=bogus")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_filter"


def test_requeue_over_the_api_is_idempotent(records, workers):
    client = api_client("olga", *ALL_PERMS)
    record = records["critical"][0]
    first = client.post(f"/api/v1/failures/{record.id}/requeue/")
    assert first.status_code == 200 and first.json()["requeued"] is True
    assert first.json()["failure"]["state"] == "requeued"
    again = client.post(f"/api/v1/failures/{record.id}/requeue/")
    assert again.status_code == 200 and again.json()["requeued"] is False
    workers.drain()
    job = LlmJob.objects.get(id=record.job_id)
    assert job.status == "completed" and job.attempts == 2
    outcome = client.get("/api/v1/failures/?state=requeued").json()["results"][0]
    assert outcome["job"]["status"] == "completed"


def test_requeue_on_another_model_needs_its_own_permission(records, workers):
    record = records["warning"]
    plain = api_client("olga", "view_failurerecord", "requeue_failurerecord")
    refused = plain.post(
        f"/api/v1/failures/{record.id}/requeue/", {"model": "claude-haiku-4-5"}, format="json"
    )
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
    allowed = api_client("pat", *ALL_PERMS)
    unknown = allowed.post(
        f"/api/v1/failures/{record.id}/requeue/", {"model": "gpt-4o"}, format="json"
    )
    assert unknown.status_code == 400 and unknown.json()["code"] == "unknown_model"
    record.refresh_from_db()
    assert record.state == "open"
    ok = allowed.post(
        f"/api/v1/failures/{record.id}/requeue/", {"model": "claude-haiku-4-5"}, format="json"
    )
    assert ok.status_code == 200 and ok.json()["failure"]["requeued_model"] == "claude-haiku-4-5"
    assert LlmJob.objects.get(id=record.job_id).model == "claude-haiku-4-5"


def test_resolve_and_ignore_over_the_api(records):
    client = api_client("rita", *ALL_PERMS)
    a, b = records["critical"]
    resolved = client.post(
        f"/api/v1/failures/{a.id}/resolve/", {"comment": "key rotated"}, format="json"
    )
    assert resolved.status_code == 200
    assert resolved.json()["failure"]["state"] == "resolved"
    assert resolved.json()["failure"]["comment"] == "key rotated"
    assert resolved.json()["failure"]["handled_by"] == "rita"
    ignored = client.post(f"/api/v1/failures/{b.id}/resolve/", {"state": "ignored"}, format="json")
    assert ignored.json()["failure"]["state"] == "ignored"
    conflict = client.post(f"/api/v1/failures/{b.id}/requeue/")
    assert conflict.status_code == 409 and conflict.json()["code"] == "failure_not_open"
    bad = client.post(f"/api/v1/failures/{a.id}/resolve/", {"state": "open"}, format="json")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_state"


def test_the_api_is_refused_to_non_staff_and_staff_without_permission(records):
    record = records["critical"][0]
    outsider = api_client("charlie", *ALL_PERMS, is_staff=False)
    for response in [
        outsider.get("/api/v1/failures/"),
        outsider.post(f"/api/v1/failures/{record.id}/requeue/"),
    ]:
        assert response.status_code == 403
        assert response.json()["code"] == "permission_denied"
    viewer = api_client("vic", "view_failurerecord")
    assert viewer.get("/api/v1/failures/").status_code == 200
    for url in [f"/api/v1/failures/{record.id}/requeue/", f"/api/v1/failures/{record.id}/resolve/"]:
        response = viewer.post(url)
        assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    assert APIClient().get("/api/v1/failures/").status_code == 401
    record.refresh_from_db()
    assert record.state == "open"
    missing = api_client("pat", *ALL_PERMS).post("/api/v1/failures/999999/requeue/")
    assert missing.status_code == 404 and missing.json()["code"] == "failure_not_found"
