"""Batch callbacks get their own delivery table (``batches_batchcallbackdelivery``) instead of an
``Alert`` with source ``batch``. Each batch's callback recorded so far is copied from its alert's
delivery (state, attempts, history, errors, times); a copied one still pending is marked failed
on the alerts side ("moved"), so only the new path sends it: its queued alerts job finds nothing
to claim, and the monitor's sweep sends it from here. Then ``Batch.callback_alert`` goes; the old
alerts stay in the alerts tables as history.
"""

import django.db.models.deletion
from django.db import migrations, models

MOVED = "moved to batches.BatchCallbackDelivery"


def copy_callbacks(apps, schema_editor):  # type: ignore[no-untyped-def]
    db = schema_editor.connection.alias
    batches = apps.get_model("batches", "Batch").objects.using(db)
    alerts = apps.get_model("alerts", "Alert").objects.using(db)
    deliveries = apps.get_model("alerts", "AlertDelivery").objects.using(db)
    callbacks = apps.get_model("batches", "BatchCallbackDelivery").objects.using(db)
    for batch in batches.filter(callback_alert__isnull=False).select_related("callback_alert"):
        alert = batch.callback_alert
        old = deliveries.filter(alert_id=alert.id).order_by("id").first()
        if old is None:
            continue
        callback = callbacks.create(
            batch=batch,
            payload=alert.details,
            state=old.state,
            attempts=old.attempts,
            last_error=old.last_error,
            history=old.history,
            next_attempt_at=old.next_attempt_at,
            delivered_at=old.delivered_at,
        )
        # auto_now_add: the time it was recorded is the alert's.
        callbacks.filter(id=callback.id).update(created_at=old.created_at)
        if old.state == "pending":
            deliveries.filter(id=old.id).update(state="failed", next_attempt_at=None, last_error=MOVED)
            alerts.filter(id=alert.id).update(state="failed", last_error=MOVED)


class Migration(migrations.Migration):

    dependencies = [
        ('batches', '0001_batches_and_items'),
        ('alerts', '0006_dlq_moved_out'),
    ]

    operations = [
        migrations.CreateModel(
            name='BatchCallbackDelivery',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('payload', models.JSONField(help_text='The body POSTed: the batch as the API showed it.')),
                ('state', models.CharField(choices=[('pending', 'Pending'), ('delivered', 'Delivered'), ('failed', 'Failed')], default='pending', max_length=10)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('last_error', models.TextField(blank=True)),
                ('history', models.JSONField(blank=True, default=list, help_text='Every attempt: {attempt, at, ok, error, ms}.')),
                ('next_attempt_at', models.DateTimeField(blank=True, help_text='When the pending attempt is due; empty once final.', null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('delivered_at', models.DateTimeField(blank=True, null=True)),
                ('batch', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='callback_delivery', to='batches.batch')),
            ],
            options={
                'verbose_name_plural': 'batch callback deliveries',
                'ordering': ['id'],
                'indexes': [models.Index(fields=['state', 'next_attempt_at'], name='batchcallback_due')],
            },
        ),
        migrations.RunPython(copy_callbacks, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name='batch',
            name='callback_alert',
        ),
    ]
