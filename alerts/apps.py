from django.apps import AppConfig


class AlertsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "alerts"

    def ready(self) -> None:
        from alerts import checks  # noqa: F401 (registers the settings checks)
        from alerts.notifications import failure_handled_hook, failure_recorded_hook
        from dlq.hooks import on_failure

        # A dead-lettered job raises its alert; its incident resolves once its records are handled.
        on_failure(recorded=failure_recorded_hook, handled=failure_handled_hook)
