"""Reads for the metrics: the counters' totals, and the same totals recomputed from the ledger.

``counter_totals`` is what a scrape exposes; ``ledger_totals`` aggregates the ledger, the
dead-letter records and the jobs themselves into the same shape. ``llm_metrics --check``, the
tests and the benchmark compare the two; ``llm_metrics --rebuild`` writes the second into the
counters (the one documented reset).
"""

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Case, Count, IntegerField, Q, Sum, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce, NullIf

from metrics.counters import attempt_outcome
from metrics.models import (
    LATENCY_BUCKETS,
    LATENCY_COLUMNS,
    TOKEN_COLUMNS,
    AttemptCounter,
    FailureCounter,
    JobCounter,
)

__all__ = ["LATENCY_BOUNDS_MS", "Totals", "counter_totals", "ledger_totals"]

LATENCY_BOUNDS_MS = tuple(int(bound * 1000) for bound in LATENCY_BUCKETS)

Key = tuple[str, ...]


@dataclass
class Totals:
    """Every counted quantity, keyed by its labels."""

    attempts: dict[Key, int] = field(default_factory=lambda: defaultdict(int))
    """(feature, model, outcome)"""
    tokens: dict[Key, int] = field(default_factory=lambda: defaultdict(int))
    """(feature, model, kind)"""
    cost_usd: dict[Key, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    """(feature, model): what the ledger rows that add booked"""
    cost_credited_usd: dict[Key, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    """(feature, model): what downward corrections took off"""
    latency_buckets: dict[Key, list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0] * len(LATENCY_COLUMNS))
    )
    """(feature, model) -> attempts per bucket (not cumulative)"""
    latency_sum_ms: dict[Key, int] = field(default_factory=lambda: defaultdict(int))
    jobs: dict[Key, int] = field(default_factory=lambda: defaultdict(int))
    """(feature, model, status)"""
    failures: dict[Key, int] = field(default_factory=lambda: defaultdict(int))
    """(severity, reason)"""

    def as_dict(self) -> dict[str, dict[Key, Any]]:
        return {
            name: {key: value for key, value in getattr(self, name).items() if value}
            for name in (
                "attempts",
                "tokens",
                "cost_usd",
                "cost_credited_usd",
                "latency_buckets",
                "latency_sum_ms",
                "jobs",
                "failures",
            )
        }

    def differences(self, other: "Totals", *, skip: tuple[Key, ...] = ()) -> list[str]:
        """Every quantity that differs between the two, as readable lines."""
        mine, theirs = self.as_dict(), other.as_dict()
        lines = []
        for name in mine:
            for key in sorted(set(mine[name]) | set(theirs[name])):
                if (name, *key) in skip:
                    continue
                left, right = mine[name].get(key, 0), theirs[name].get(key, 0)
                if left != right and not (left == [0] * len(LATENCY_COLUMNS) and not right):
                    lines.append(f"{name}{list(key)}: {left} != {right}")
        return lines


def counter_totals() -> Totals:
    """The counters, shards summed: what /metrics exposes."""
    totals = Totals()
    sums = {
        column: Sum(column)
        for column in (
            "attempts",
            *TOKEN_COLUMNS.values(),
            "cost_usd",
            "cost_credited_usd",
            "latency_sum_ms",
            *LATENCY_COLUMNS,
        )
    }
    for row in AttemptCounter.objects.values("feature", "model", "outcome").annotate(**sums):
        _add_attempt_row(totals, row, outcome=row["outcome"])
    for row in JobCounter.objects.values("feature", "model", "status").annotate(n=Sum("jobs")):
        totals.jobs[(row["feature"], row["model"], row["status"])] += int(row["n"])
    for row in FailureCounter.objects.values("severity", "reason").annotate(n=Sum("failures")):
        totals.failures[(row["severity"], row["reason"])] += int(row["n"])
    return totals


def _add_attempt_row(totals: Totals, row: dict[str, Any], *, outcome: str) -> None:
    pair = (row["feature"], row["model"])
    totals.attempts[(*pair, outcome)] += int(row["attempts"] or 0)
    for kind, column in TOKEN_COLUMNS.items():
        totals.tokens[(*pair, kind)] += int(row[column] or 0)
    totals.cost_usd[pair] += Decimal(row["cost_usd"] or 0)
    totals.cost_credited_usd[pair] += Decimal(row["cost_credited_usd"] or 0)
    totals.latency_sum_ms[pair] += int(row["latency_sum_ms"] or 0)
    buckets = totals.latency_buckets[pair]
    for index, column in enumerate(LATENCY_COLUMNS):
        buckets[index] += int(row[column] or 0)


def _latency_bucket_case() -> Case:
    return Case(
        *(
            When(latency_ms__lte=bound, then=Value(index))
            for index, bound in enumerate(LATENCY_BOUNDS_MS)
        ),
        default=Value(len(LATENCY_BOUNDS_MS)),
        output_field=IntegerField(),
    )


def ledger_totals() -> Totals:
    """The same quantities, aggregated (in the database) from the ledger, the dead-letter
    records and the jobs. Job statuses are not history the database keeps, so they are read from
    what each status leaves behind (see ``docs/operations.md``, "Metrics")."""
    from dlq.models import FailureRecord
    from jobs.models import LlmJob
    from ledger.models import CostEntry

    totals = Totals()
    is_attempt = Q(entry_type="attempt")
    rows = (
        CostEntry.objects.order_by()
        .values("feature", "model", "outcome", "reason_code")
        .annotate(
            bucket=Case(
                When(Q(latency_ms__isnull=False) & is_attempt, then=_latency_bucket_case()),
                default=Value(-1),
                output_field=IntegerField(),
            )
        )
        .values("feature", "model", "outcome", "reason_code", "bucket")
        .annotate(
            attempts=Count("id", filter=is_attempt),
            cost_added=Sum("cost_usd", filter=Q(cost_usd__gt=0)),
            cost_taken=Sum("cost_usd", filter=Q(cost_usd__lt=0)),
            latency_total=Sum("latency_ms", filter=is_attempt),
            latency_n=Count("latency_ms", filter=is_attempt),
            **{f"sum_{column}": Sum(column) for column in TOKEN_COLUMNS.values()},
        )
    )
    for row in rows:
        bucket = row.pop("bucket")
        row["cost_usd"] = row["cost_added"]
        row["cost_credited_usd"] = -(row["cost_taken"] or 0)
        row["latency_sum_ms"] = row["latency_total"]
        for column in TOKEN_COLUMNS.values():
            row[column] = row[f"sum_{column}"]
        for index, column in enumerate(LATENCY_COLUMNS):
            row[column] = row["latency_n"] if bucket == index else 0
        outcome = attempt_outcome(outcome=row["outcome"], reason_code=row["reason_code"])
        _add_attempt_row(totals, row, outcome=outcome)

    for row in (
        FailureRecord.objects.order_by().values("severity", "reason_code").annotate(n=Count("id"))
    ):
        totals.failures[(row["severity"].lower(), row["reason_code"])] += row["n"]

    def jobs(status: str, queryset: Any, feature: str, model: str) -> None:
        for row in queryset.order_by().values(feature, model).annotate(n=Count("pk")):
            totals.jobs[(row[feature], row[model], status)] += row["n"]

    # A job is counted under the model it ran on: a fallback's once it moved (jobs/fallbacks.py).
    served = LlmJob.objects.annotate(ran=Coalesce(NullIf("served_by", Value("")), "model"))
    current = LlmJob.objects.annotate(ran=Coalesce(NullIf("current_model", Value("")), "model"))
    jobs("completed", served.filter(status="completed"), "feature", "ran")
    jobs("cancelled", current.filter(status="cancelled"), "feature", "ran")
    records = FailureRecord.objects.annotate(
        snapshot_model=KeyTextTransform("model", "request_snapshot")
    )
    jobs("failed", records, "job__feature", "snapshot_model")
    # queued: every submit, and every requeue from the dead-letter queue.
    jobs("queued", LlmJob.objects.all(), "feature", "model")
    jobs("queued", records.filter(state="requeued"), "job__feature", "snapshot_model")
    # running: every claim left a ledger attempt row, or is running now.
    attempts = CostEntry.objects.filter(is_attempt)
    jobs("running", attempts, "feature", "model")
    jobs("running", current.filter(status="running"), "feature", "ran")
    # retrying: every attempt that led to a retry says after what delay.
    jobs("retrying", attempts.filter(retry_delay_seconds__isnull=False), "feature", "model")
    return totals
