from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """The Prometheus metrics: counters kept in the transactions of what they count, /metrics."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "metrics"
    verbose_name = "Metrics"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from jobs.transitions import on_transition
        from ledger.hooks import on_cost_entry
        from metrics.counters import count_cost_entry, count_transition, count_transitions
        from metrics.rebuild import metrics_backfill_once

        # In the transactions of what they count. The job counters come first among the
        # in-transaction subscribers (this app is listed before batches and pipelines), as
        # they did when jobs/transitions.py counted itself: every transition takes its locks
        # in one order.
        on_transition(count_transition, in_transaction=True, many=count_transitions)
        on_cost_entry(count_cost_entry)
        post_migrate.connect(metrics_backfill_once, sender=self)
