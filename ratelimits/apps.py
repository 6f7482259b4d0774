from django.apps import AppConfig


class RatelimitsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "ratelimits"
    verbose_name = "Rate limits"

    def ready(self) -> None:
        from ratelimits import checks  # noqa: F401 (registers the settings checks)
