import django_rq.apps
from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operating the system: the ops dashboard, health checks, django-rq's dashboard."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "ops"
    verbose_name = "Operations"


class RqConfig(django_rq.apps.DjangoRqAdminConfig):
    """django-rq itself (label, models and permission unchanged) under a readable name: the admin
    index would show its label, "Django_Rq". INSTALLED_APPS names it instead of ``django_rq``."""

    default = False  # not a candidate for the ops app's own config
    verbose_name = "Queues (RQ)"
