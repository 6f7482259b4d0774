from django.apps import AppConfig


class DeferredConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "deferred"
    verbose_name = "Deferred work (provider message batches)"
