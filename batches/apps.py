from django.apps import AppConfig


class BatchesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "batches"

    def ready(self) -> None:
        from batches.counters import batch_job_transition
        from jobs.transitions import on_transition

        # Inside each job transition's transaction: the batch's counters move, and the batch
        # stops or finishes, exactly when one of its jobs ends (or is requeued).
        on_transition(batch_job_transition, in_transaction=True)
