"""Redis down answers 202 (the row is the truth); the database down answers 503.

Redis is really unreachable here: the queues point at a closed port, so every client call fails
with a connection error, as it does while Redis restarts.
"""

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from dlq.models import FailureRecord
from jobs.models import LlmJob
from jobs.reconciler import reconcile_jobs
from keys.testing import api_key_for
from tests.conftest import job_body, make_user, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_down(settings: Any) -> Iterator[None]:
    original = settings.RQ_QUEUES
    dead = f"redis://127.0.0.1:{_closed_port()}/15"
    settings.RQ_QUEUES = {name: {**conf, "URL": dead} for name, conf in original.items()}
    try:
        yield
    finally:
        settings.RQ_QUEUES = original


@contextmanager
def database_down() -> Iterator[None]:
    connection.close()
    port = connection.settings_dict["PORT"]
    connection.settings_dict["PORT"] = str(_closed_port())
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port


def test_a_submit_while_redis_is_down_is_accepted_and_runs_once_redis_is_back(
    alice_client, workers, settings
):
    with redis_down(settings):
        response = alice_client.post("/api/v1/jobs/", job_body(), format="json")
    assert response.status_code == 202, response.content
    job = LlmJob.objects.get(id=response.json()["id"])
    assert job.status == "queued" and job.rq_job_id
    assert workers.queue.count == 0  # nothing reached Redis

    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0
    assert reconcile_jobs().requeued_lost == 1
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1


def test_cancel_while_redis_is_down_works(alice_client, settings):
    job = submit(alice_client)
    with redis_down(settings):
        response = alice_client.post(f"/api/v1/jobs/{job.id}/cancel/")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"


def test_requeue_from_the_dlq_while_redis_is_down_is_recorded_and_runs_later(
    alice_client, workers, fake_provider, settings
):
    fake_provider.faults({"400": 1.0})
    job = submit(alice_client)
    workers.drain()
    record = FailureRecord.objects.get(job=job)
    fake_provider.reset()
    staff = make_user("olga", "view_failurerecord", "requeue_failurerecord", is_staff=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(staff)}")

    with redis_down(settings):
        response = client.post(f"/api/v1/failures/{record.id}/requeue/")
    assert response.status_code == 200, response.content
    assert response.json()["requeued"] is True
    job.refresh_from_db()
    assert job.status == "queued"

    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0
    assert reconcile_jobs().requeued_lost == 1
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2


def test_the_database_down_answers_503_service_unavailable(alice_client):
    with database_down():
        submitted = alice_client.post("/api/v1/jobs/", job_body(), format="json")
        listed = alice_client.get("/api/v1/jobs/")
    for response in (submitted, listed):
        assert response.status_code == 503, response.content
        body = response.json()
        assert body["code"] == "service_unavailable"
        assert body["message"] and "password" not in body["message"].lower()
        assert response["Retry-After"] == "5"
    assert LlmJob.objects.count() == 0
