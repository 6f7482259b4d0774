from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operating the system: the ops dashboard, health checks, django-rq's dashboard."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "ops"
    verbose_name = "Operations"
