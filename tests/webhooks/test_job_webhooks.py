"""A job's webhooks end to end: the job API with ``callback_url``, in-process RQ workers (the
llm queue, then the alerts queue that delivers), the fake provider, MariaDB, Redis, and a real
HTTP receiver. Each final state is POSTed once, signed with the API key's secret, with the job
as the job API shows it; a receiver that fails is retried; every attempt is in the log."""

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from dlq.models import FailureRecord
from dlq.services import failure_requeue
from jobs.models import LlmJob
from jobs.services import job_submit
from jobs.transitions import Transition
from keys.scopes import ALL_SCOPES
from keys.services import api_key_create
from keys.validation import KeyRequest
from tests.conftest import Workers, job_body, submit
from tests.webhooks.helpers import receiver, signature_ok
from webhooks.job_events import job_webhook_transition
from webhooks.models import WebhookDelivery, WebhookSubscription

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.fixture(autouse=True)
def quick_webhooks(settings: Any) -> None:
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True  # the receiver listens on 127.0.0.1
    settings.WEBHOOK_RETRY_SCHEDULE = [0.01, 0.01, 0.01]


def keyed_client(user: Any) -> tuple[APIClient, str]:
    """A client of a new API key of ``user``, and the key's webhook signing secret, made as its
    holder does (``POST /api/v1/webhooks/signing-secret/``) and shown once."""
    request = KeyRequest(name="hooks", scopes=list(ALL_SCOPES))
    _key, token = api_key_create(user=user, request=request)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    response = client.post("/api/v1/webhooks/signing-secret/")
    assert response.status_code == 201, response.content
    return client, response.json()["secret"]


def deliver() -> None:
    """What the alerts worker does: every delivery and its retries, in this process."""
    Workers("alerts").drain()


def test_a_completed_job_is_posted_once_signed_with_the_keys_secret_as_the_api_shows_it(
    alice, workers
):
    client, secret = keyed_client(alice)
    assert secret.startswith("whsec_")
    with receiver() as hook:
        job = submit(client, callback_url=f"{hook.url}/hooks/jobs?token=t0ken")
        workers.drain()
        deliver()
        (request,) = hook.wait_for(1)
    shown = client.get(f"/api/v1/jobs/{job.id}/").json()
    assert shown["status"] == "completed"
    assert hook.bodies == [{"type": "job.completed", "job": shown}]
    assert request["path"] == "/hooks/jobs?token=t0ken"
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["LLM-Webhook-Event"] == "job.completed"
    assert request["headers"]["LLM-Webhook-Attempt"] == "1"
    assert signature_ok(request, secret)
    assert not signature_ok(request, secret + "x")
    tampered = {**request, "raw": request["raw"].replace(b"completed", b"cancelled", 1)}
    assert not signature_ok(tampered, secret)
    delivery = WebhookDelivery.objects.get()
    assert request["headers"]["LLM-Webhook-Id"] == str(delivery.event_id)
    assert (delivery.subject_kind, delivery.subject_id) == ("job", str(job.id))
    assert delivery.state == WebhookDelivery.State.DELIVERED and delivery.attempts == 1
    assert delivery.last_status_code == 200 and delivery.history[0]["status"] == 200


def test_a_receiver_that_answers_500_twice_gets_the_delivery_on_the_third_try(alice, workers):
    client, secret = keyed_client(alice)
    with receiver([500, 500]) as hook:
        job = submit(client, callback_url=hook.url)
        workers.drain()
        deliver()
        requests = hook.wait_for(3)
    assert len(requests) == 3
    assert [r["headers"]["LLM-Webhook-Attempt"] for r in requests] == ["1", "2", "3"]
    assert len({r["headers"]["LLM-Webhook-Id"] for r in requests}) == 1
    assert len({r["raw"] for r in requests}) == 1  # the same body, signed again each time
    assert all(signature_ok(r, secret) for r in requests)
    delivery = WebhookDelivery.objects.get(subject_id=str(job.id))
    assert delivery.state == WebhookDelivery.State.DELIVERED and delivery.attempts == 3
    assert [entry["status"] for entry in delivery.history] == [500, 500, 200]
    assert "HTTP 500" in delivery.history[0]["error"]


def test_a_receiver_still_failing_after_the_schedule_leaves_the_delivery_failed(
    alice_client, workers, settings
):
    settings.WEBHOOK_RETRY_SCHEDULE = [0.01]
    with receiver([503, 503, 503]) as hook:
        submit(alice_client, callback_url=hook.url)
        workers.drain()
        deliver()
        assert len(hook.wait_for(2)) == 2
    delivery = WebhookDelivery.objects.get()
    assert delivery.state == WebhookDelivery.State.FAILED and delivery.attempts == 2
    assert delivery.next_attempt_at is None and delivery.last_status_code == 503


def test_failed_cancelled_and_requeued_jobs_post_each_final_state(
    alice_client, workers, fake_provider, no_breaker
):
    fake_provider.faults({"400": 1.0})
    with receiver() as hook:
        failing = submit(alice_client, callback_url=f"{hook.url}/failing")
        waiting = submit(alice_client, callback_url=f"{hook.url}/waiting")
        assert alice_client.post(f"/api/v1/jobs/{waiting.id}/cancel/").status_code == 200
        workers.drain()
        fake_provider.faults({})
        failure_requeue(record=FailureRecord.objects.get(job=failing))
        workers.drain()
        deliver()
        hook.wait_for(3)
    by_path: dict[str, list[Any]] = {}
    for request, body in zip(hook.requests, hook.bodies, strict=True):
        by_path.setdefault(request["path"], []).append(body)
    assert [b["type"] for b in by_path["/waiting"]] == ["job.cancelled"]
    assert by_path["/waiting"][0]["job"]["status"] == "cancelled"
    failed, completed = by_path["/failing"]
    assert failed["type"] == "job.failed" and failed["job"]["status"] == "failed"
    assert failed["job"]["error"]["http_status"] == 400
    assert completed["type"] == "job.completed" and completed["job"]["output"]["text"]
    assert LlmJob.objects.get(id=failing.id).status == "completed"
    assert WebhookDelivery.objects.filter(subject_id=str(failing.id)).count() == 2


def test_a_job_without_a_callback_records_nothing(alice_client, workers):
    job = submit(alice_client)
    workers.drain()
    assert LlmJob.objects.get(id=job.id).status == "completed"
    assert not WebhookDelivery.objects.exists() and not WebhookSubscription.objects.exists()
    assert "llmops_webhook" not in LlmJob.objects.get(id=job.id).metadata


@pytest.mark.parametrize(
    ("url", "allow_private"),
    [
        ("ftp://hooks.example.com/x?token=s3cret", True),
        ("https://user:s3cret@hooks.example.com/x", True),
        ("http://localhost:9/x?token=s3cret", False),
        ("http://10.1.2.3/x?token=s3cret", False),
        ("https://hooks.example.com/" + "s3cret" * 100, True),
        ("https://hooks.example.com/a b?token=s3cret", True),
        (["https://hooks.example.com/"], True),
    ],
)
def test_a_bad_callback_url_is_refused_with_a_stable_code_and_nothing_saved(
    alice_client, settings, url, allow_private
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = allow_private
    response = alice_client.post("/api/v1/jobs/", job_body(callback_url=url), format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid_callback_url"
    assert body["detail"]["field"] == "callback_url"
    assert "s3cret" not in response.content.decode()
    assert not LlmJob.objects.exists()


def test_a_repeated_idempotency_key_with_another_callback_is_a_conflict(alice_client):
    def post(url: str) -> Any:
        return alice_client.post(
            "/api/v1/jobs/",
            job_body(callback_url=url),
            format="json",
            HTTP_IDEMPOTENCY_KEY="same-key",
        )

    first = post("https://hooks.example.com/a")
    assert first.status_code == 202
    assert post("https://hooks.example.com/a").json()["id"] == first.json()["id"]
    again = post("https://hooks.example.com/b")
    assert again.status_code == 409 and again.json()["code"] == "idempotency_conflict"
    assert WebhookSubscription.objects.count() == 1


def test_the_front_door_service_takes_the_callback_as_an_argument(alice, workers):
    """What a front door does with ``LLM-Callback-URL``: ``job_submit(callback_url=...)``."""
    with receiver() as hook:
        job, created = job_submit(user=alice, data=job_body(), callback_url=hook.url)
        workers.drain()
        deliver()
        hook.wait_for(1)
    assert created and hook.bodies[0]["job"]["id"] == str(job.id)
    # Without an API key, the feature's secret signs it.
    assert WebhookDelivery.objects.get().signer == "feature:email-classify"


def test_a_final_transition_of_a_job_without_a_callback_costs_no_query(alice_client):
    """The front doors and batches end thousands of jobs a minute: the webhook subscriber must
    not read anything for the ones without a callback (the metadata marker says so)."""
    job = submit(alice_client)
    job.status = LlmJob.Status.COMPLETED
    with CaptureQueriesContext(connection) as queries:
        job_webhook_transition(job, Transition.COMPLETED)
    assert len(queries) == 0
    marked = submit(alice_client, callback_url="https://hooks.example.com/x")
    marked.status = LlmJob.Status.COMPLETED
    with CaptureQueriesContext(connection) as queries:
        job_webhook_transition(marked, Transition.COMPLETED)
    assert len(queries) >= 2  # its subscription read, its delivery written
