from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operating the system: Prometheus metrics, the ops dashboard, health checks, JSON logs."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "ops"
    verbose_name = "Operations"
