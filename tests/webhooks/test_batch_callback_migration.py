"""The data migration that moves batch callbacks into the webhook log (batches 0006): each
``BatchCallbackDelivery`` row becomes a ``WebhookDelivery`` with its id, state, attempts,
history and times, the batch's URL and signer; a pending one is then delivered by the old task
name an RQ job queued before the upgrade carries."""

import importlib
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from batches.tasks import deliver_callback
from keys.models import ApiKey
from tests.batches.helpers import item, submit_batch
from tests.webhooks.helpers import receiver
from webhooks.models import WebhookDelivery

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

MIGRATION = importlib.import_module("batches.migrations.0006_callbacks_to_webhooks")


@pytest.fixture
def old_apps() -> Any:
    """The models as they were before the move, with the old table created again."""
    nodes = [("batches", "0005_deadlines_tags"), ("webhooks", "0001_initial")]
    apps = MigrationLoader(connection).project_state(nodes).apps
    old = apps.get_model("batches", "BatchCallbackDelivery")
    with connection.schema_editor() as editor:
        editor.create_model(old)
    yield apps
    with connection.schema_editor() as editor:
        editor.delete_model(old)


def test_callbacks_move_with_their_ids_and_a_pending_one_is_still_delivered(
    alice_client, old_apps, settings
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    old = old_apps.get_model("batches", "BatchCallbackDelivery")
    with receiver() as hook:
        done = submit_batch(alice_client, [item("a")], callback_url="https://hooks.example.com/a")
        waiting = submit_batch(alice_client, [item("b")], callback_url=f"{hook.url}/b?token=t")
        recorded = timezone.now() - timedelta(hours=1)
        history = [{"attempt": 1, "at": recorded.isoformat(), "ok": False, "error": "HTTP 503"}]
        old.objects.create(
            id=40, batch_id=done.id, payload={"type": "batch.finished", "batch": {"id": "a"}},
            state="delivered", attempts=1, history=[], delivered_at=recorded,
        )  # fmt: skip
        old.objects.create(
            id=41, batch_id=waiting.id, payload={"type": "batch.finished", "batch": {"id": "b"}},
            state="pending", attempts=1, last_error="HTTP 503", history=history,
            next_attempt_at=recorded,
        )  # fmt: skip
        old.objects.filter(id=41).update(created_at=recorded)
        with connection.schema_editor() as editor:
            MIGRATION.to_webhooks(old_apps, editor)

        moved = WebhookDelivery.objects.get(id=41)
        key = ApiKey.objects.get()
        assert (moved.subject_kind, moved.subject_id, moved.event) == (
            "batch",
            str(waiting.id),
            "batch.finished",
        )
        assert moved.url == f"{hook.url}/b?token=t" and moved.signer == f"key:{key.id}"
        assert (moved.state, moved.attempts, moved.history) == ("pending", 1, history)
        assert moved.created_at == recorded and moved.next_attempt_at == recorded
        assert WebhookDelivery.objects.get(id=40).state == "delivered"
        assert WebhookDelivery.objects.get(id=40).url == "https://hooks.example.com/a"

        # The RQ job queued before the upgrade for its second attempt: the old task name.
        assert deliver_callback(41, 2) == "delivered"
        assert hook.bodies == [{"type": "batch.finished", "batch": {"id": "b"}}]
        assert WebhookDelivery.objects.create(
            subject_kind="job", subject_id="x", event="job.completed", url="https://e.com/",
            signer="feature:x", payload={},
        ).id > 41  # fmt: skip
