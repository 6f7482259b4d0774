from django.apps import AppConfig


class AlertsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "alerts"

    def ready(self) -> None:
        from alerts import checks  # noqa: F401 (registers the settings checks)
