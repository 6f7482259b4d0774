from django.apps import AppConfig


class JobsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "jobs"

    def ready(self) -> None:
        # Registers the live-events subscriber of every LlmJob transition, and the settings checks.
        from jobs import checks, events  # noqa: F401
