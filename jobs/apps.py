from typing import Any

from django.apps import AppConfig


def _release_held_jobs(**kwargs: Any) -> None:
    """A breaker closed: the jobs it held go back on the queue now, not at the next pass."""
    from jobs.reconciler import requeue_waiting_jobs

    requeue_waiting_jobs(grace_seconds=0)


class JobsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "jobs"

    def ready(self) -> None:
        # Registers the live-events subscriber of every LlmJob transition, and the settings checks.
        from jobs import breaker, checks, events  # noqa: F401
        from runtime import queue_order

        # Every push to the llm queue keeps its lanes: high, normal, low (jobs/priorities.py).
        queue_order.install()

        breaker.breaker_closed.connect(_release_held_jobs, dispatch_uid="jobs_release_held")
