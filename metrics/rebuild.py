"""The one documented reset of the metrics: rewrite the counters from the ledger.

Counters are kept in the transactions of what they count, so they need no rebuild in normal
operation. ``llm_metrics --rebuild`` exists for what the counting cannot see: a database restored
from a backup, ledger rows written by hand, or an installation that already had a ledger when
the metrics came (``migrate`` runs it then, once: see ``metrics/apps.py``). A counter may go down
across a rebuild, which Prometheus reads as a counter reset.
"""

from django.db import connection, transaction

from metrics.models import (
    LATENCY_COLUMNS,
    TOKEN_COLUMNS,
    AttemptCounter,
    FailureCounter,
    JobCounter,
)
from metrics.selectors import Totals, ledger_totals

__all__ = ["metrics_rebuild"]


@transaction.atomic
def metrics_rebuild() -> Totals:
    """Replace every counter by the ledger's totals; returns them."""
    if connection.vendor == "postgresql":
        # Counting waits for this lock, and the lock for the transactions counting now: the
        # totals then hold every committed row, and a row committed after them is counted on
        # the new counters (PostgreSQL's READ COMMITTED reads each statement afresh).
        tables = ", ".join(
            connection.ops.quote_name(model._meta.db_table)
            for model in (AttemptCounter, JobCounter, FailureCounter)
        )
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {tables} IN SHARE ROW EXCLUSIVE MODE")
    totals = ledger_totals()
    # Lock out concurrent counting on MariaDB/MySQL while the rows are replaced.
    AttemptCounter.objects.select_for_update().exists()
    AttemptCounter.objects.all().delete()
    JobCounter.objects.all().delete()
    FailureCounter.objects.all().delete()
    pairs = set(totals.cost_usd) | set(totals.cost_credited_usd) | set(totals.latency_sum_ms)
    attempt_rows: dict[tuple[str, str, str], AttemptCounter] = {}
    for (feature, model, outcome), count in totals.attempts.items():
        attempt_rows[(feature, model, outcome)] = AttemptCounter(
            feature=feature, model=model, outcome=outcome, shard=0, attempts=count
        )
    # Tokens, cost and latency are per (feature, model) in the totals: they go on one row of the
    # pair (the outcome label does not apply to them in the exposition).
    for feature, model in pairs | {(f, m) for f, m, _ in totals.tokens}:
        row = next((r for (f, m, _), r in attempt_rows.items() if (f, m) == (feature, model)), None)
        if row is None:
            row = attempt_rows[(feature, model, "success")] = AttemptCounter(
                feature=feature, model=model, outcome="success", shard=0
            )
        for kind, column in TOKEN_COLUMNS.items():
            setattr(row, column, totals.tokens.get((feature, model, kind), 0))
        row.cost_usd = totals.cost_usd.get((feature, model), 0)
        row.cost_credited_usd = totals.cost_credited_usd.get((feature, model), 0)
        buckets = totals.latency_buckets.get((feature, model)) or [0] * len(LATENCY_COLUMNS)
        for column, count in zip(LATENCY_COLUMNS, buckets, strict=True):
            setattr(row, column, count)
        row.latency_count = sum(buckets)
        row.latency_sum_ms = totals.latency_sum_ms.get((feature, model), 0)
    AttemptCounter.objects.bulk_create(attempt_rows.values())
    JobCounter.objects.bulk_create(
        JobCounter(feature=f, model=m, status=s, shard=0, jobs=n)
        for (f, m, s), n in totals.jobs.items()
    )
    FailureCounter.objects.bulk_create(
        FailureCounter(severity=sev, reason=reason, shard=0, failures=n)
        for (sev, reason), n in totals.failures.items()
    )
    return totals


def metrics_backfill_once(**kwargs: object) -> None:
    """After ``migrate``: counters still empty but a ledger already there means the metrics
    arrived on an existing installation; count its history once."""
    from jobs.models import LlmJob

    if AttemptCounter.objects.exists() or JobCounter.objects.exists():
        return
    if LlmJob.objects.exists():
        metrics_rebuild()
