"""Batch callbacks move to the shared webhook log (``webhooks_webhookdelivery``), which jobs and
agent runs use too. Each ``BatchCallbackDelivery`` is copied with its id (an RQ job queued
before the upgrade, ``batches.tasks.deliver_callback(id, attempt)``, then finds its row), its
state, attempts, history, errors and times, the batch's URL, and the signer its batch gets now
(its API key, else its feature); then the table goes.
"""

import uuid

from django.core.management.color import no_style
from django.db import migrations


def _reset_sequence(schema_editor, model):  # type: ignore[no-untyped-def]
    """Rows copied with their ids leave PostgreSQL's id sequence behind them (the next insert
    would take an id already used); MariaDB's AUTO_INCREMENT follows by itself (no SQL)."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), [model]):
            cursor.execute(sql)


def _signer(batch):  # type: ignore[no-untyped-def]
    return f"key:{batch.api_key_id}" if batch.api_key_id else f"feature:{batch.feature}"


def to_webhooks(apps, schema_editor):  # type: ignore[no-untyped-def]
    db = schema_editor.connection.alias
    old = apps.get_model("batches", "BatchCallbackDelivery").objects.using(db)
    new = apps.get_model("webhooks", "WebhookDelivery").objects.using(db)
    for callback in old.select_related("batch").order_by("id").iterator():
        batch = callback.batch
        new.create(
            id=callback.id,
            event_id=uuid.uuid4(),
            subject_kind="batch",
            subject_id=str(batch.id),
            event="batch.finished",
            url=batch.callback_url,
            signer=_signer(batch),
            payload=callback.payload,
            state=callback.state,
            attempts=callback.attempts,
            last_error=callback.last_error,
            history=callback.history,
            next_attempt_at=callback.next_attempt_at,
            delivered_at=callback.delivered_at,
        )
        # auto_now_add: the time it was recorded is the callback's.
        new.filter(id=callback.id).update(created_at=callback.created_at)
    _reset_sequence(schema_editor, new.model)


def from_webhooks(apps, schema_editor):  # type: ignore[no-untyped-def]
    db = schema_editor.connection.alias
    old = apps.get_model("batches", "BatchCallbackDelivery").objects.using(db)
    new = apps.get_model("webhooks", "WebhookDelivery").objects.using(db)
    batches = apps.get_model("batches", "Batch").objects.using(db)
    for delivery in new.filter(subject_kind="batch").order_by("id").iterator():
        batch = batches.filter(id=delivery.subject_id).first()
        if batch is None or old.filter(batch=batch).exists():
            continue
        callback = old.create(
            id=delivery.id,
            batch=batch,
            payload=delivery.payload,
            state=delivery.state,
            attempts=delivery.attempts,
            last_error=delivery.last_error,
            history=delivery.history,
            next_attempt_at=delivery.next_attempt_at,
            delivered_at=delivery.delivered_at,
        )
        old.filter(id=callback.id).update(created_at=delivery.created_at)
        new.filter(id=delivery.id).delete()
    _reset_sequence(schema_editor, old.model)


class Migration(migrations.Migration):
    dependencies = [
        ("batches", "0005_deadlines_tags"),
        ("webhooks", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(to_webhooks, from_webhooks),
        migrations.DeleteModel(name="BatchCallbackDelivery"),
    ]
