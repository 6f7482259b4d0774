"""FailureRecord and BulkRequeue moved to the dlq app with their tables: removed from this app's
state only (no table changes). ``Alert.failure`` now points at ``dlq.FailureRecord``, the same
table, so its foreign key is left as it is in the database."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("alerts", "0005_loops_and_bulk_requeue"),
        ("dlq", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name="alert",
                    name="failure",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="alerts",
                        to="dlq.failurerecord",
                    ),
                ),
                migrations.DeleteModel(name="BulkRequeue"),
                migrations.DeleteModel(name="FailureRecord"),
            ],
        ),
    ]
