from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "pipelines"

    def ready(self) -> None:
        from jobs.transitions import on_transition
        from pipelines.services import pipeline_job_transition

        # Inside each job transition's transaction: the next step's job is created, or the
        # pipeline stops, exactly when the step's job completes, fails or is cancelled.
        on_transition(pipeline_job_transition, in_transaction=True)
