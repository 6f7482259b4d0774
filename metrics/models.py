"""The counters behind the Prometheus metrics, kept in the database.

Each counter row is incremented inside the transaction that writes what it counts (a ledger row,
a job transition, a dead letter), so a counter commits or rolls back with its fact: the metrics
equal the ledger whatever process, thread or host did the work, and nothing is kept in a worker
process's memory (rq forks a work horse per job; prometheus_client's multiprocess files would
pile up one per work horse). A scrape reads these few rows, however many jobs ran.

Rows are sharded (``shard``) so that concurrent workers rarely wait on the same row; a scrape
sums the shards (why they stay with the threaded worker: docs/architecture.md, "Metrics").
Counters only grow: nothing but ``llm_metrics --rebuild`` rewrites them. The tables keep the
names they had in the ops app (``db_table``), where they were first created.
"""

from decimal import Decimal

from django.db import models

SHARDS = 8
"""Rows per label set: each process and thread updates its own (metrics/counters.py), a scrape
sums them."""

LATENCY_BUCKETS: tuple[float, ...] = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
"""Upper bounds in seconds of ``llm_provider_latency_seconds``; ``+Inf`` follows."""

LATENCY_COLUMNS: tuple[str, ...] = tuple(
    "le_" + f"{bound:g}".replace(".", "_") for bound in LATENCY_BUCKETS
) + ("le_inf",)
"""One column per bucket, counting the attempts of that bucket alone (cumulated at scrape)."""

TOKEN_COLUMNS: dict[str, str] = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_write_5m": "cache_write_5m_tokens",
    "cache_write_1h": "cache_write_1h_tokens",
    "cache_read": "cache_read_tokens",
}
"""The ``kind`` label of ``llm_tokens_total`` -> the column (same names as the ledger's)."""


def _count() -> models.PositiveBigIntegerField:
    return models.PositiveBigIntegerField(default=0)


class AttemptCounter(models.Model):
    """What the ledger booked, per feature, model and attempt outcome (the metric's label)."""

    feature = models.CharField(max_length=64)
    model = models.CharField(max_length=100)
    outcome = models.CharField(max_length=20)
    shard = models.PositiveSmallIntegerField(default=0)

    attempts = _count()
    """Ledger rows of type ``attempt`` (a correction is not an attempt)."""
    input_tokens = _count()
    output_tokens = _count()
    cache_write_5m_tokens = _count()
    cache_write_1h_tokens = _count()
    cache_read_tokens = _count()
    cost_usd = models.DecimalField(max_digits=20, decimal_places=6, default=Decimal(0))
    """Sum of the ``cost_usd`` of the ledger rows that add: every attempt (estimates included)
    and every correction upwards."""
    cost_credited_usd = models.DecimalField(max_digits=20, decimal_places=6, default=Decimal(0))
    """Sum of what the downward corrections took off (a positive amount). A counter never
    decreases, so the ledger's net spend is ``cost_usd - cost_credited_usd``."""

    latency_count = _count()
    latency_sum_ms = _count()
    le_0_5 = _count()
    le_1 = _count()
    le_2_5 = _count()
    le_5 = _count()
    le_10 = _count()
    le_20 = _count()
    le_30 = _count()
    le_60 = _count()
    le_120 = _count()
    le_300 = _count()
    le_600 = _count()
    le_inf = _count()

    class Meta:
        db_table = "ops_attemptcounter"
        constraints = [
            models.UniqueConstraint(
                fields=["feature", "model", "outcome", "shard"], name="one_attempt_counter"
            )
        ]

    def __str__(self) -> str:
        return f"{self.feature}/{self.model}/{self.outcome}#{self.shard}"


class JobCounter(models.Model):
    """Jobs that entered each status, per feature and model."""

    feature = models.CharField(max_length=64)
    model = models.CharField(max_length=100)
    status = models.CharField(max_length=16)
    shard = models.PositiveSmallIntegerField(default=0)
    jobs = _count()

    class Meta:
        db_table = "ops_jobcounter"
        constraints = [
            models.UniqueConstraint(
                fields=["feature", "model", "status", "shard"], name="one_job_counter"
            )
        ]

    def __str__(self) -> str:
        return f"{self.feature}/{self.model}/{self.status}#{self.shard}"


class FailureCounter(models.Model):
    """Dead letters (FailureRecord rows created), per severity and reason."""

    severity = models.CharField(max_length=10)
    reason = models.CharField(max_length=40)
    shard = models.PositiveSmallIntegerField(default=0)
    failures = _count()

    class Meta:
        db_table = "ops_failurecounter"
        constraints = [
            models.UniqueConstraint(
                fields=["severity", "reason", "shard"], name="one_failure_counter"
            )
        ]

    def __str__(self) -> str:
        return f"{self.severity}/{self.reason}#{self.shard}"
