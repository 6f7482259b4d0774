from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operating the system: Prometheus metrics, the ops dashboard, health checks, JSON logs."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from ops.rebuild import metrics_backfill_once

        post_migrate.connect(metrics_backfill_once, sender=self)
