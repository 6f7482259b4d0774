"""A batch's life with in-process workers (rq's SimpleWorker in burst mode, the real fake
provider, MariaDB and Redis): live events on the owner's socket, the callback's retries and
secrecy, a requeue after the batch finished, and the background cancel put back by the monitor.
"""

import logging
import socket
from typing import Any

import django_rq
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from batches.models import Batch
from batches.services import batch_cancels_resume
from dlq.models import FailureRecord
from dlq.services import failure_requeue
from jobs.models import LlmJob
from jobs.services import job_cancel
from keys.testing import api_key_for
from llmops.asgi import application
from llmops.queues import DEFAULT_QUEUE
from tests.batches.helpers import item, receiver, submit_batch
from tests.conftest import Workers
from webhooks.models import WebhookDelivery

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def _key(user: Any) -> str:
    return api_key_for(user)


def test_the_owner_hears_progress_coalesced_and_one_finished_event(
    alice, bob, alice_client, workers, settings
):
    settings.LLM_BATCH_PROGRESS_INTERVAL = 60  # one at once, the rest folded into the finish

    async def scenario() -> tuple[list[dict[str, Any]], Batch]:
        alice_socket = WebsocketCommunicator(
            application, "/ws/jobs/", subprotocols=["token", await sync_to_async(_key)(alice)]
        )
        bob_socket = WebsocketCommunicator(
            application, "/ws/jobs/", subprotocols=["token", await sync_to_async(_key)(bob)]
        )
        assert (await alice_socket.connect())[0] and (await bob_socket.connect())[0]
        items = [item(f"n{i}") for i in range(20)] + [item("n0")] * 5
        batch = await sync_to_async(submit_batch)(alice_client, items)
        await sync_to_async(workers.drain)()
        events = []
        while not events or events[-1]["type"] != "batch.finished":
            event = await alice_socket.receive_json_from(timeout=5)
            if event["type"].startswith("batch."):
                events.append(event)
        assert await bob_socket.receive_nothing(timeout=0.3)
        await alice_socket.disconnect()
        await bob_socket.disconnect()
        return events, await sync_to_async(Batch.objects.get)(id=batch.id)

    events, batch = async_to_sync(scenario)()
    progress, done = events[:-1], events[-1]
    assert [e["type"] for e in progress] == ["batch.progress"]
    assert progress[0]["batch"] == {
        "id": str(batch.id),
        "status": "running",
        "total": 25,
        "pending": 25,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
    }
    assert done["batch"]["status"] == "completed" and done["batch"]["completed"] == 25
    assert done["batch"]["pending"] == 0 and done["batch"]["finished_at"]
    assert float(done["batch"]["cost_usd"]) > 0
    assert batch.completed == 25


def test_the_callback_is_retried_until_delivered_and_never_shows_its_secret(
    alice_client, workers, settings, caplog
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    settings.WEBHOOK_RETRY_SCHEDULE = [0.01, 0.01]
    caplog.set_level(logging.INFO)
    with receiver([503]) as hook:
        url = f"{hook.url}/hooks/batch?token=s3cret"
        batch = submit_batch(alice_client, [item("a"), item("b")], callback_url=url)
        workers.drain()
        Workers("alerts").drain()
        assert len(hook.requests) == 2  # a 503, then delivered
        assert hook.bodies[0] == hook.bodies[1]
    delivery = WebhookDelivery.objects.get()
    assert delivery.state == WebhookDelivery.State.DELIVERED and delivery.attempts == 2
    assert delivery.subject_id == str(batch.id) and len(delivery.history) == 2
    assert delivery.payload == hook.bodies[1]
    assert "s3cret" not in caplog.text and "/hooks/batch" not in caplog.text
    assert "s3cret" not in delivery.last_error + str(delivery.history)


def test_a_callback_refused_with_a_client_error_is_not_retried(alice_client, workers, settings):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    with receiver([404]) as hook:
        submit_batch(alice_client, [item()], callback_url=f"{hook.url}/gone")
        workers.drain()
        Workers("alerts").drain()
        assert len(hook.requests) == 1
    assert WebhookDelivery.objects.get().state == WebhookDelivery.State.FAILED


def test_a_callback_to_a_private_address_is_refused_when_it_goes_out(
    alice_client, workers, settings
):
    # Names are looked up when the callback goes out, not at submit: this machine's own name
    # resolves to one of its addresses (loopback or private), and is refused then, for good.
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = False
    with receiver() as hook:
        port = hook.url.rsplit(":", 1)[1]
        submit_batch(alice_client, [item()], callback_url=f"http://{socket.gethostname()}:{port}/")
        workers.drain()
        Workers("alerts").drain()
        assert hook.requests == []
    delivery = WebhookDelivery.objects.get()
    assert delivery.state == WebhookDelivery.State.FAILED and delivery.attempts == 1
    assert "private, local or reserved" in delivery.last_error


def test_a_requeue_after_the_batch_finished_moves_its_counters_but_finishes_nothing_again(
    alice_client, workers, fake_provider, settings, no_breaker
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    fake_provider.faults({"400": 1.0})
    with receiver() as hook:
        batch = submit_batch(alice_client, [item("a"), item("b"), item("a")], callback_url=hook.url)
        workers.drain()
        batch.refresh_from_db()
        assert (batch.status, batch.failed, batch.pending) == ("completed", 3, 0)
        finished_at = batch.finished_at
        fake_provider.faults({})
        record = FailureRecord.objects.get(job__batch_items__index=0, job__batch_items__batch=batch)
        failure_requeue(record=record)
        batch.refresh_from_db()
        assert (batch.failed, batch.pending) == (1, 2)  # items 0 and 2 share the job
        workers.drain()
        Workers("alerts").drain()
        assert len(hook.requests) == 1
    batch.refresh_from_db()
    assert (batch.completed, batch.failed, batch.pending) == (2, 1, 0)
    assert batch.finished_at == finished_at and batch.status == "completed"


def test_a_stopped_batch_whose_cancel_redis_lost_is_resumed_by_the_monitor(alice_client):
    batch = submit_batch(alice_client, [item(f"n{i}") for i in range(5)])
    assert alice_client.post(f"/api/v1/batches/{batch.id}/cancel/").status_code == 200
    django_rq.get_queue(DEFAULT_QUEUE).connection.flushdb()  # the cancel job is lost
    assert batch_cancels_resume(grace_seconds=60) == 0  # not yet: it may only be late
    assert batch_cancels_resume(grace_seconds=0) == 1
    assert batch_cancels_resume(grace_seconds=0) == 0  # waiting in Redis: left alone
    Workers(DEFAULT_QUEUE).drain()
    batch.refresh_from_db()
    assert (batch.status, batch.cancelled, batch.pending) == ("cancelled", 5, 0)
    assert set(LlmJob.objects.values_list("status", flat=True)) == {"cancelled"}


def test_a_job_read_without_its_metadata_still_moves_its_batch(alice_client):
    batch = submit_batch(alice_client, [item("a"), item("b")])
    for job in LlmJob.objects.filter(batch_items__batch=batch).defer("metadata"):
        job_cancel(job=job)
    batch.refresh_from_db()
    assert (batch.cancelled, batch.pending, batch.status) == (2, 0, "completed")
    assert batch.finished_at is not None
