from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webhooks"

    def ready(self) -> None:
        from jobs.transitions import on_transition
        from webhooks import checks  # noqa: F401 (registers the settings' checks)
        from webhooks.job_events import job_webhook_transition

        # Inside each job transition's transaction: a final state's delivery is recorded with
        # it or not at all, so a worker killed after the commit cannot lose it.
        on_transition(job_webhook_transition, in_transaction=True)
