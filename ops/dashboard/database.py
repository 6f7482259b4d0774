"""The dashboard's panels read from the database, each in a few aggregate queries.

Per-minute and per-day buckets are made by the database (Django's Trunc functions: the same code
on MariaDB and SQLite) over indexes that cover the queries: ``job_finished_timings`` on jobs,
``cost_dashboard_created`` and ``cost_report_created`` on the ledger. A percentile is the value at
its nearest rank of an ``ORDER BY ... LIMIT 1 OFFSET k``: the database sorts, Python reads one
value. No rows are loaded to be counted.
"""

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, QuerySet, Sum
from django.db.models.functions import TruncDate, TruncMinute
from django.urls import reverse

from alerts.models import Severity
from dlq.models import FailureRecord
from jobs.models import LlmJob, ProviderBreaker
from ledger.forecast import budget_statuses
from ledger.models import Budget, CostEntry
from ledger.selectors import api_key_label
from llmops.queues import LLM_QUEUE
from ops.dashboard.defaults import (
    COST_DAYS,
    MAX_BUDGETS,
    MAX_KEYS,
    PERCENTS,
    RECENT_FAILURES,
    WINDOW_HOURS,
)

__all__ = [
    "Window",
    "as_seconds",
    "breaker_states",
    "budget_use",
    "cost_in_window",
    "cost_per_feature_per_day",
    "spend_by_key",
    "failures_by_severity",
    "initial_window_hours",
    "jobs_in_database",
    "llm_queue_timings",
    "money",
    "nearest_rank",
    "recent_dead_letters",
    "throughput_per_minute",
]

NOT_SUCCESS = ~Q(outcome=CostEntry.Outcome.SUCCESS)


@dataclass(frozen=True)
class Window:
    """The last ``hours`` hours in whole UTC minutes, the current (partial) minute included."""

    hours: int
    now: datetime

    @property
    def since(self) -> datetime:
        current = self.now.astimezone(UTC).replace(second=0, microsecond=0)
        return current - timedelta(minutes=self.hours * 60 - 1)

    @property
    def minutes(self) -> list[datetime]:
        return [self.since + timedelta(minutes=n) for n in range(self.hours * 60)]


def initial_window_hours(now: datetime) -> int:
    """The window the page opens on: the smallest that holds the oldest attempt or dead letter
    of the largest window, so that a fresh install's first jobs are not one spike at the right
    edge of six hours; the last hour when there is nothing yet. Two reads of an index's first
    entry (``created_at`` leads one on each table)."""
    since = Window(WINDOW_HOURS[-1], now).since
    firsts = [
        model.objects.filter(created_at__gte=since, created_at__lte=now).aggregate(
            first=Min("created_at")
        )["first"]
        for model in (CostEntry, FailureRecord)
    ]
    found = [first for first in firsts if first is not None]
    if not found:
        return WINDOW_HOURS[0]
    oldest = min(found)
    return next(hours for hours in WINDOW_HOURS if oldest >= Window(hours, now).since)


# --- Throughput and failures per minute ---------------------------------------------------------


def _per_minute(queryset: QuerySet, field: str, window: Window, *extra: str, **counts: Any) -> list:
    return list(
        queryset.filter(**{f"{field}__gte": window.since, f"{field}__lte": window.now})
        .annotate(minute=TruncMinute(field, tzinfo=UTC))
        .values("minute", *extra)
        .annotate(**counts)
        .order_by()
    )


def throughput_per_minute(window: Window) -> tuple[dict, dict[str, int]]:
    """Per minute: provider attempts and the failed ones (the ledger), jobs completed (their
    rows) and jobs dead-lettered (DLQ records); plus the dead letters' severities summed."""
    index = {minute: n for n, minute in enumerate(window.minutes)}
    size = len(index)
    series = {
        name: [0] * size
        for name in ("attempts", "failed_attempts", "completed_jobs", "dead_lettered")
    }

    def add(name: str, minute: datetime, value: int) -> None:
        position = index.get(minute.astimezone(UTC))
        if position is not None:
            series[name][position] += value

    attempts = CostEntry.objects.filter(entry_type=CostEntry.EntryType.ATTEMPT)
    for row in _per_minute(
        attempts, "created_at", window, total=Count("id"), failed=Count("id", filter=NOT_SUCCESS)
    ):
        add("attempts", row["minute"], row["total"])
        add("failed_attempts", row["minute"], row["failed"])
    completed = LlmJob.objects.filter(status=LlmJob.Status.COMPLETED)
    for row in _per_minute(completed, "completed_at", window, total=Count("id")):
        add("completed_jobs", row["minute"], row["total"])
    severities = {severity: 0 for severity in Severity.values}
    for row in _per_minute(
        FailureRecord.objects.all(), "created_at", window, "severity", total=Count("id")
    ):
        add("dead_lettered", row["minute"], row["total"])
        severities[row["severity"]] = severities.get(row["severity"], 0) + row["total"]
    return {"labels": [f"{m:%H:%M}" for m in window.minutes], **series}, severities


def cost_in_window(window: Window) -> Decimal:
    entries = CostEntry.objects.filter(created_at__gte=window.since, created_at__lte=window.now)
    return entries.aggregate(total=Sum("cost_usd"))["total"] or Decimal(0)


# --- Wait and runtime per queue -----------------------------------------------------------------


def nearest_rank(count: int, percent: int) -> int:
    """0-based index of the nearest-rank percentile among ``count`` sorted values."""
    return max(1, math.ceil(percent / 100 * count)) - 1


def as_seconds(value: timedelta | float | int | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return round(value.total_seconds(), 3)
    return round(float(value), 3)


def _percentiles_in_database(queryset: QuerySet, expression: Any, count: int) -> dict:
    """p50, p95 and max of ``expression`` over ``queryset``: one sorted read per percentile."""
    if not count:
        return {f"p{p}": None for p in PERCENTS} | {"max": None}
    ordered = queryset.annotate(value=expression).order_by("value").values_list("value", flat=True)

    def at(rank: int, rows: QuerySet = ordered) -> float | None:
        # A slice, not an index: rows finished since the count shift ranks, never raise.
        return as_seconds(next(iter(rows[rank : rank + 1]), None))

    values = {f"p{p}": at(nearest_rank(count, p)) for p in PERCENTS}
    return values | {"max": at(0, ordered.reverse())}


def _duration(end: str, start: str) -> ExpressionWrapper:
    return ExpressionWrapper(F(end) - F(start), output_field=DurationField())


def llm_queue_timings(window: Window) -> dict:
    """The llm queue from the job rows finished in the window on their first attempt: a row
    keeps its first start and its last enqueue, so only a one-attempt job has both exact."""
    finished = LlmJob.objects.filter(
        completed_at__gte=window.since,
        completed_at__lte=window.now,
        status__in=[LlmJob.Status.COMPLETED, LlmJob.Status.FAILED],
        attempts=1,
        enqueued_at__isnull=False,
        started_at__gte=F("enqueued_at"),
    )
    count = finished.count()
    return {
        "queue": LLM_QUEUE,
        "measured": True,
        "source": "job rows finished in the window on their first attempt",
        "samples": count,
        "wait": _percentiles_in_database(finished, _duration("started_at", "enqueued_at"), count),
        "runtime": _percentiles_in_database(
            finished, _duration("completed_at", "started_at"), count
        ),
    }


# --- Failures, cost, budgets, breaker -----------------------------------------------------------


def _dlq_url(**filters: str) -> str:
    url = reverse("admin:dlq_failurerecord_changelist")
    query = "&".join(f"{name}__exact={value}" for name, value in filters.items())
    return f"{url}?{query}" if query else url


def failures_by_severity(in_window: dict[str, int]) -> dict:
    """Dead letters of the window by severity, and the DLQ's open records by severity."""
    open_records = dict(
        FailureRecord.objects.filter(state=FailureRecord.State.OPEN)
        .values_list("severity")
        .annotate(total=Count("id"))
        .order_by()
    )
    severities = list(Severity.values)
    return {
        "severities": severities,
        "in_window": [in_window.get(s, 0) for s in severities],
        "open": [open_records.get(s, 0) for s in severities],
        "open_urls": [_dlq_url(severity=s, state=FailureRecord.State.OPEN) for s in severities],
        "dlq_url": _dlq_url(state=FailureRecord.State.OPEN),
    }


def money(value: Decimal) -> str:
    return f"{value:.6f}"


def cost_per_feature_per_day(now: datetime) -> dict:
    today = now.astimezone(UTC).date()
    days = [today - timedelta(days=n) for n in range(COST_DAYS - 1, -1, -1)]
    since = datetime.combine(days[0], datetime.min.time(), tzinfo=UTC)
    rows = (
        CostEntry.objects.filter(created_at__gte=since, created_at__lte=now)
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day", "feature")
        .annotate(total=Sum("cost_usd"))
        .order_by()
    )
    position = {day: n for n, day in enumerate(days)}
    features: dict[str, list[Decimal]] = {}
    for row in rows:
        day = row["day"]
        if isinstance(day, datetime):  # a backend that truncates to a datetime
            day = day.date()
        if isinstance(day, date) and day in position:
            costs = features.setdefault(row["feature"], [Decimal(0)] * len(days))
            costs[position[day]] += row["total"] or Decimal(0)
    totals = {feature: sum(costs, Decimal(0)) for feature, costs in features.items()}
    ranked = sorted(features.items(), key=lambda item: (-totals[item[0]], item[0]))
    return {
        "days": [day.isoformat() for day in days],
        "features": [
            {"feature": feature, "cost_usd": [money(cost) for cost in costs]}
            for feature, costs in ranked
        ],
        "total_usd": money(sum(totals.values(), Decimal(0))),
    }


def spend_by_key(now: datetime) -> list[dict]:
    """The ledger of the last ``COST_DAYS`` days by API key, the most spent first (at most
    ``MAX_KEYS``; the jobs of sessions as one row without a key): two queries."""
    from keys.models import ApiKey  # keys imports the ledger

    today = datetime.combine(now.astimezone(UTC).date(), datetime.min.time(), tzinfo=UTC)
    since = today - timedelta(days=COST_DAYS - 1)
    rows = list(
        CostEntry.objects.filter(created_at__gte=since, created_at__lte=now)
        .values("api_key_id")
        .annotate(
            total=Sum("cost_usd"),
            today=Sum("cost_usd", filter=Q(created_at__gte=today)),
            jobs=Count("job_id", distinct=True),
        )
        .order_by("-total", "api_key_id")[:MAX_KEYS]
    )
    keys = ApiKey.objects.select_related("user").in_bulk(
        [row["api_key_id"] for row in rows if row["api_key_id"] is not None]
    )
    found = []
    for row in rows:
        key = keys.get(row["api_key_id"])
        if key is None:
            label, user, scopes, state, url = "(no key: a session)", None, [], "", None
        else:
            label, user, scopes = api_key_label(key), key.user.get_username(), key.scopes
            state = "revoked" if key.revoked_at else ("active" if key.is_active else "expired")
            url = reverse("admin:keys_apikey_change", args=[key.id])
        found.append(
            {
                "key": label,
                "user": user,
                "scopes": scopes,
                "state": state,
                "url": url,
                "jobs": row["jobs"],
                "cost_usd": money(row["total"] or Decimal(0)),
                "today_usd": money(row["today"] or Decimal(0)),
            }
        )
    return found


def budget_use(now: datetime) -> list[dict]:
    """Every enabled budget's current window and forecast, as the budget admin shows them."""
    budgets = Budget.objects.filter(enabled=True).select_related("user", "api_key").order_by("id")
    return [
        {
            "id": status.budget.id,
            "name": status.budget.name,
            "period": status.budget.period,
            "limit_usd": money(status.budget.limit_usd),
            "spent_usd": money(status.usage.spent_usd),
            "reserved_usd": money(status.usage.reserved_usd),
            "percent_used": float(status.usage.percent_used),
            "soft_alert_percent": status.budget.soft_alert_percent,
            "exhausted": status.usage.exhausted,
            "window_end": status.usage.window_end,
            "projected_spend_usd": money(status.forecast.projected_spend_usd),
            "projected_exhaustion_at": status.forecast.projected_exhaustion_at,
            "url": reverse("admin:ledger_budget_change", args=[status.budget.id]),
        }
        for status in budget_statuses(budgets=budgets[:MAX_BUDGETS], at=now)
    ]


def breaker_states() -> dict:
    return {
        "enabled": settings.LLM_BREAKER_ENABLED,
        "breakers": [
            {
                "provider": breaker.provider,
                "state": breaker.state,
                "reason_code": breaker.reason_code,
                "message": breaker.message,
                "opened_at": breaker.opened_at,
                "next_probe_at": breaker.next_probe_at,
                "probes": breaker.probes,
                "url": reverse("admin:jobs_providerbreaker_change", args=[breaker.id]),
            }
            for breaker in ProviderBreaker.objects.order_by("provider")
        ],
        "list_url": reverse("admin:jobs_providerbreaker_changelist"),
    }


def recent_dead_letters() -> dict:
    records = (
        FailureRecord.objects.select_related("job")
        .only(
            "id", "created_at", "severity", "reason_code", "state", "attempts",
            "job__id", "job__feature", "job__model",
        )
        .order_by("-created_at", "-id")[:RECENT_FAILURES]
    )  # fmt: skip
    return {
        "dlq_url": _dlq_url(state=FailureRecord.State.OPEN),
        "records": [
            {
                "id": record.id,
                "created_at": record.created_at,
                "severity": record.severity,
                "reason_code": record.reason_code,
                "state": record.state,
                "attempts": record.attempts,
                "feature": record.job.feature,
                "model": record.job.model,
                "job_id": str(record.job_id),
                "url": reverse("admin:dlq_failurerecord_change", args=[record.id]),
                "job_url": reverse("admin:jobs_llmjob_change", args=[record.job_id]),
            }
            for record in records
        ],
    }


def jobs_in_database() -> dict[str, int]:
    """Jobs waiting or running by their rows: the truth even when Redis lost or never got them."""
    counted = dict(
        LlmJob.objects.filter(
            status__in=[LlmJob.Status.QUEUED, LlmJob.Status.RETRYING, LlmJob.Status.RUNNING]
        )
        .values_list("status")
        .annotate(total=Count("id"))
        .order_by()
    )
    return {status: counted.get(status, 0) for status in ("queued", "retrying", "running")}
