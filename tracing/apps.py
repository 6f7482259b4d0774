from django.apps import AppConfig


class TracingConfig(AppConfig):
    name = "tracing"
    verbose_name = "Traces"

    def ready(self) -> None:
        from jobs.transitions import on_transition
        from tracing import checks  # noqa: F401  (registers the check)
        from tracing.export import export_job_trace

        # After the commit of each transition: a job that has ended exports its spans (nothing
        # when tracing is off, tracing/setup.py). A run exports its own when it finishes
        # (agents/services.py).
        on_transition(lambda job, transition: export_job_trace(job))
