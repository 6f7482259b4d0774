"""Batches' callbacks go through the shared webhook log: signed like every webhook, with the body
batches always sent (``{"type": "batch.finished", "batch": ...}``), and their old deliveries'
RQ jobs (``batches.tasks.deliver_callback``) still run."""

import io
from typing import Any

import pytest
from django.core.management import call_command

from batches.models import Batch
from keys.models import ApiKey
from tests.batches.helpers import item, submit_batch
from tests.conftest import Workers
from tests.webhooks.helpers import receiver, signature_ok
from webhooks.models import WebhookDelivery

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_a_finished_batch_is_posted_signed_and_logged(alice_client, workers, settings: Any):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    key = ApiKey.objects.get()  # alice_client's
    out = io.StringIO()
    call_command("webhook_secret", "--key", str(key.id), stdout=out, stderr=io.StringIO())
    with receiver() as hook:
        batch = submit_batch(alice_client, [item("a"), item("b")], callback_url=hook.url)
        workers.drain()
        Workers("alerts").drain()
        (request,) = hook.wait_for(1)
    shown = alice_client.get(f"/api/v1/batches/{batch.id}/").json()
    assert hook.bodies == [{"type": "batch.finished", "batch": shown}]
    assert request["headers"]["LLM-Webhook-Event"] == "batch.finished"
    assert signature_ok(request, out.getvalue().strip())
    delivery = WebhookDelivery.objects.get(subject_kind="batch")
    assert delivery.subject_id == str(batch.id) and delivery.state == "delivered"


def test_a_callback_queued_before_the_move_still_runs_under_its_old_task(
    alice_client, settings: Any
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    with receiver() as hook:
        batch = submit_batch(alice_client, [item()], callback_url=hook.url)
        delivery = WebhookDelivery.objects.create(
            subject_kind="batch",
            subject_id=str(batch.id),
            event="batch.finished",
            url=hook.url,
            signer="feature:ticket-summary",
            payload={"type": "batch.finished", "batch": {"id": str(batch.id)}},
        )
        Workers("alerts").queue.enqueue("batches.tasks.deliver_callback", delivery.id, 1)
        Workers("alerts").drain()
        hook.wait_for(1)
    assert hook.bodies == [{"type": "batch.finished", "batch": {"id": str(batch.id)}}]
    assert Batch.objects.get(id=batch.id).callback_url == hook.url
