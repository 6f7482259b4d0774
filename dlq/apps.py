from django.apps import AppConfig


class DlqConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "dlq"
    verbose_name = "Dead-letter queue"

    def ready(self) -> None:
        from dlq.services import failure_on_transition
        from jobs.transitions import on_transition

        # Inside the transition: the record commits, or rolls back, with the job's `failed`.
        on_transition(failure_on_transition, in_transaction=True)
