# The counters came from the ops app with their tables (ops/migrations/0001_initial.py created
# them; ops/migrations/0002 removed them from the ops app's state): only Django's state changes
# here, no data moves. Their content types follow them, so that permissions given on them stay.

from decimal import Decimal

from django.db import migrations, models


COUNTERS = ["attemptcounter", "failurecounter", "jobcounter"]


def content_types_to(app_label: str, previous: str):
    def move(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        ContentType.objects.using(schema_editor.connection.alias).filter(
            app_label=previous, model__in=COUNTERS
        ).update(app_label=app_label)

    return move


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("ops", "0002_counters_move_to_metrics"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AttemptCounter",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("feature", models.CharField(max_length=64)),
                        ("model", models.CharField(max_length=100)),
                        ("outcome", models.CharField(max_length=20)),
                        ("shard", models.PositiveSmallIntegerField(default=0)),
                        ("attempts", models.PositiveBigIntegerField(default=0)),
                        ("input_tokens", models.PositiveBigIntegerField(default=0)),
                        ("output_tokens", models.PositiveBigIntegerField(default=0)),
                        ("cache_write_5m_tokens", models.PositiveBigIntegerField(default=0)),
                        ("cache_write_1h_tokens", models.PositiveBigIntegerField(default=0)),
                        ("cache_read_tokens", models.PositiveBigIntegerField(default=0)),
                        (
                            "cost_usd",
                            models.DecimalField(
                                decimal_places=6, default=Decimal("0"), max_digits=20
                            ),
                        ),
                        (
                            "cost_credited_usd",
                            models.DecimalField(
                                decimal_places=6, default=Decimal("0"), max_digits=20
                            ),
                        ),
                        ("latency_count", models.PositiveBigIntegerField(default=0)),
                        ("latency_sum_ms", models.PositiveBigIntegerField(default=0)),
                        ("le_0_5", models.PositiveBigIntegerField(default=0)),
                        ("le_1", models.PositiveBigIntegerField(default=0)),
                        ("le_2_5", models.PositiveBigIntegerField(default=0)),
                        ("le_5", models.PositiveBigIntegerField(default=0)),
                        ("le_10", models.PositiveBigIntegerField(default=0)),
                        ("le_20", models.PositiveBigIntegerField(default=0)),
                        ("le_30", models.PositiveBigIntegerField(default=0)),
                        ("le_60", models.PositiveBigIntegerField(default=0)),
                        ("le_120", models.PositiveBigIntegerField(default=0)),
                        ("le_300", models.PositiveBigIntegerField(default=0)),
                        ("le_600", models.PositiveBigIntegerField(default=0)),
                        ("le_inf", models.PositiveBigIntegerField(default=0)),
                    ],
                    options={
                        "db_table": "ops_attemptcounter",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("feature", "model", "outcome", "shard"),
                                name="one_attempt_counter",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="FailureCounter",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("severity", models.CharField(max_length=10)),
                        ("reason", models.CharField(max_length=40)),
                        ("shard", models.PositiveSmallIntegerField(default=0)),
                        ("failures", models.PositiveBigIntegerField(default=0)),
                    ],
                    options={
                        "db_table": "ops_failurecounter",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("severity", "reason", "shard"), name="one_failure_counter"
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="JobCounter",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("feature", models.CharField(max_length=64)),
                        ("model", models.CharField(max_length=100)),
                        ("status", models.CharField(max_length=16)),
                        ("shard", models.PositiveSmallIntegerField(default=0)),
                        ("jobs", models.PositiveBigIntegerField(default=0)),
                    ],
                    options={
                        "db_table": "ops_jobcounter",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("feature", "model", "status", "shard"),
                                name="one_job_counter",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(
            content_types_to("metrics", previous="ops"), content_types_to("ops", previous="metrics")
        ),
    ]
