"""FailureRecord and BulkRequeue move here from alerts/ with their tables (state only).

Their tables keep their names (``db_table``): no data moves. ``alerts.0006_dlq_moved_out``
removes them from the alerts app's state after this one; ``0002_move_content_types`` then moves
their content types, so the permissions granted on them keep working.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        # The tables are created (fresh database) or exist already (existing one).
        ("alerts", "0005_loops_and_bulk_requeue"),
        ("jobs", "0004_llmjob_concurrency_key"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='BulkRequeue',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('description', models.CharField(blank=True, help_text='The filter, as shown.', max_length=500)),
                        ('model', models.CharField(blank=True, help_text='Requeue on this model.', max_length=100)),
                        ('record_ids', models.JSONField(default=list, help_text='The open records selected.')),
                        ('total', models.PositiveIntegerField(default=0)),
                        ('processed', models.PositiveIntegerField(default=0)),
                        ('moved', models.PositiveIntegerField(default=0)),
                        ('skipped', models.PositiveIntegerField(default=0)),
                        ('state', models.CharField(choices=[('pending', 'Pending'), ('running', 'Running'), ('finished', 'Finished'), ('failed', 'Failed')], default='pending', max_length=10)),
                        ('last_error', models.TextField(blank=True)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'alerts_bulkrequeue',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='FailureRecord',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('severity', models.CharField(choices=[('WARNING', 'Warning'), ('ERROR', 'Error'), ('CRITICAL', 'Critical')], db_index=True, max_length=10)),
                        ('reason_code', models.CharField(db_index=True, max_length=40)),
                        ('retries_exhausted', models.BooleanField(default=False)),
                        ('http_status', models.PositiveSmallIntegerField(blank=True, null=True)),
                        ('error_type', models.CharField(blank=True, max_length=60)),
                        ('message', models.TextField(blank=True)),
                        ('request_id', models.CharField(blank=True, max_length=100)),
                        ('attempts', models.PositiveIntegerField()),
                        ('request_snapshot', models.JSONField()),
                        ('state', models.CharField(choices=[('open', 'Open'), ('requeued', 'Requeued'), ('resolved', 'Resolved'), ('ignored', 'Ignored')], default='open', max_length=10)),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('alerted_at', models.DateTimeField(blank=True, help_text='When its alert was sent or folded into the open one; empty: not alerted yet.', null=True)),
                        ('handled_at', models.DateTimeField(blank=True, null=True)),
                        ('comment', models.TextField(blank=True)),
                        ('requeued_model', models.CharField(blank=True, help_text='The model the job was requeued with, if changed.', max_length=100)),
                        ('handled_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('job', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='failures', to='jobs.llmjob')),
                    ],
                    options={
                        'verbose_name': 'failure (DLQ)',
                        'verbose_name_plural': 'failures (DLQ)',
                        'db_table': 'alerts_failurerecord',
                        'ordering': ['-created_at'],
                        'permissions': [('requeue_failurerecord', 'Can requeue dead-lettered jobs'), ('requeue_other_model_failurerecord', 'Can requeue dead-lettered jobs on another model'), ('requeue_matching_failurerecord', 'Can requeue every dead-lettered job in a filter'), ('resolve_failurerecord', 'Can resolve dead-lettered jobs'), ('ignore_failurerecord', 'Can ignore dead-lettered jobs')],
                        'indexes': [models.Index(fields=['state', '-created_at'], name='failure_state_created'), models.Index(fields=['alerted_at', 'created_at'], name='failure_unalerted')],
                    },
                ),
            ],
        ),
    ]
