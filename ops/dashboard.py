"""The ops dashboard's numbers: the picture an operator opens first, in a few aggregate queries.

Counts and sums are made by the database: GROUP BY over per-minute or per-day buckets built with
Django's Trunc functions (the same code on MariaDB and SQLite), over indexes that cover them
(``job_finished_timings``, the ledger's ``cost_report_created`` and ``cost_dashboard_created``).
A percentile is the row at its nearest rank of an ``ORDER BY ... LIMIT 1 OFFSET k``: the database
sorts, Python reads one value. Nothing loads rows to count them.

Redis (queue depths, workers, rq's registries) is read apart from the database: when it is down
those panels say "Redis unavailable" and everything else is still served.
"""

import math
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import django_rq
from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, QuerySet, Sum
from django.db.models.functions import TruncDate, TruncMinute
from django.urls import reverse
from django.utils import timezone
from redis.exceptions import RedisError
from rq import Worker
from rq.job import Job
from rq.worker import BaseWorker

from alerts.models import FailureRecord, Severity
from alerts.queue_health import oldest_wait_seconds
from jobs.models import LlmJob, ProviderBreaker
from ledger.forecast import budget_statuses
from ledger.models import Budget, CostEntry
from llmops.queues import ALERTS_QUEUE, DEFAULT_QUEUE, LLM_QUEUE, QUEUE_NAMES, RUN_LLM_JOB_TASK

__all__ = [
    "COST_DAYS",
    "DEFAULT_WINDOW_HOURS",
    "REFRESH_SECONDS",
    "WINDOW_HOURS",
    "Window",
    "dashboard_data",
]

WINDOW_HOURS = (1, 6, 24)
"""The time ranges the charts offer; per-minute buckets, so 24 h is 1,440 points."""
DEFAULT_WINDOW_HOURS = 6
REFRESH_SECONDS = 10
"""How often the page asks for fresh numbers: near-live without loading the database."""
COST_DAYS = 14
"""Cost per feature per day covers today (UTC) and the 13 days before it."""
RECENT_FAILURES = 10
MAX_BUDGETS = 50
"""Budgets are tens; each costs a few queries (usage and forecast), so the panel stops at this."""
RQ_TIMING_SAMPLE = 200
"""Finished rq jobs read per queue for the default and alerts timings (rq keeps a finished job
for its result_ttl, 500 s by default, so this is the last few minutes, not the window)."""
PERCENTS = (50, 95)

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


def dashboard_data(*, hours: int = DEFAULT_WINDOW_HOURS, now: datetime | None = None) -> dict:
    """Everything the page shows, as JSON-ready values (money as strings, times as datetimes)."""
    if hours not in WINDOW_HOURS:
        raise ValueError(f"hours must be one of {WINDOW_HOURS}, not {hours!r}")
    window = Window(hours, now or timezone.now())
    throughput, severities = _throughput(window)
    redis = _redis_panels()
    return {
        "generated_at": window.now,
        "refresh_seconds": REFRESH_SECONDS,
        "window": {
            "hours": hours,
            "choices": list(WINDOW_HOURS),
            "since": window.since,
            "until": window.now,
        },
        "summary": {
            "attempts": sum(throughput["attempts"]),
            "failed_attempts": sum(throughput["failed_attempts"]),
            "completed_jobs": sum(throughput["completed_jobs"]),
            "dead_lettered": sum(throughput["dead_lettered"]),
            "cost_usd": _money(_cost_in_window(window)),
        },
        "throughput": throughput,
        "timings": [_llm_timings(window)]
        + [
            redis["timings"].get(name) or _unmeasured(name, redis["error"])
            for name in (DEFAULT_QUEUE, ALERTS_QUEUE)
        ],
        "failures": _failures(severities),
        "cost_per_day": _cost_per_feature_per_day(window.now),
        "budgets": _budgets(window.now),
        "queues": {
            "available": redis["available"],
            "error": redis["error"],
            "queues": redis["queues"],
            "jobs_in_database": _jobs_in_database(),
        },
        "workers": {
            "available": redis["available"],
            "error": redis["error"],
            "workers": redis["workers"],
        },
        "breakers": _breakers(),
        "recent_failures": _recent_failures(),
    }


# --- Throughput and failures per minute ---------------------------------------------------------


def _per_minute(queryset: QuerySet, field: str, window: Window, *extra: str, **counts: Any) -> list:
    return list(
        queryset.filter(**{f"{field}__gte": window.since, f"{field}__lte": window.now})
        .annotate(minute=TruncMinute(field, tzinfo=UTC))
        .values("minute", *extra)
        .annotate(**counts)
        .order_by()
    )


def _throughput(window: Window) -> tuple[dict, dict[str, int]]:
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


def _cost_in_window(window: Window) -> Decimal:
    entries = CostEntry.objects.filter(created_at__gte=window.since, created_at__lte=window.now)
    return entries.aggregate(total=Sum("cost_usd"))["total"] or Decimal(0)


# --- Wait and runtime per queue -----------------------------------------------------------------


def _nearest_rank(count: int, percent: int) -> int:
    """0-based index of the nearest-rank percentile among ``count`` sorted values."""
    return max(1, math.ceil(percent / 100 * count)) - 1


def _seconds(value: timedelta | float | int | None) -> float | None:
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
        return _seconds(next(iter(rows[rank : rank + 1]), None))

    values = {f"p{p}": at(_nearest_rank(count, p)) for p in PERCENTS}
    return values | {"max": at(0, ordered.reverse())}


def _duration(end: str, start: str) -> ExpressionWrapper:
    return ExpressionWrapper(F(end) - F(start), output_field=DurationField())


def _llm_timings(window: Window) -> dict:
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


def _percentiles_of(values: list[float]) -> dict:
    if not values:
        return {f"p{p}": None for p in PERCENTS} | {"max": None}
    values = sorted(values)
    return {f"p{p}": round(values[_nearest_rank(len(values), p)], 3) for p in PERCENTS} | {
        "max": round(values[-1], 3)
    }


def _rq_timings(queue_name: str) -> dict:
    """A queue without job rows of its own, from the last jobs in rq's finished registry."""
    queue = django_rq.get_queue(queue_name)
    ids = queue.finished_job_registry.get_job_ids(0, RQ_TIMING_SAMPLE - 1, desc=True, cleanup=False)
    waits, runtimes = [], []
    for job in Job.fetch_many(ids, connection=queue.connection, serializer=queue.serializer):
        if job and job.enqueued_at and job.started_at and job.ended_at:
            waits.append((job.started_at - job.enqueued_at).total_seconds())
            runtimes.append((job.ended_at - job.started_at).total_seconds())
    return {
        "queue": queue_name,
        "measured": True,
        "source": (
            f"the last {len(waits)} jobs in rq's finished registry"
            if waits
            else "no job in rq's finished registry (rq keeps one for its result_ttl, 500 s)"
        ),
        "samples": len(waits),
        "wait": _percentiles_of(waits),
        "runtime": _percentiles_of(runtimes),
    }


def _unmeasured(queue_name: str, reason: str | None) -> dict:
    return {
        "queue": queue_name,
        "measured": False,
        "source": reason or "not measured",
        "samples": 0,
        "wait": _percentiles_of([]),
        "runtime": _percentiles_of([]),
    }


# --- Failures, cost, budgets, breaker -----------------------------------------------------------


def _dlq_url(**filters: str) -> str:
    url = reverse("admin:alerts_failurerecord_changelist")
    query = "&".join(f"{name}__exact={value}" for name, value in filters.items())
    return f"{url}?{query}" if query else url


def _failures(in_window: dict[str, int]) -> dict:
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


def _money(value: Decimal) -> str:
    return f"{value:.6f}"


def _cost_per_feature_per_day(now: datetime) -> dict:
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
            {"feature": feature, "cost_usd": [_money(cost) for cost in costs]}
            for feature, costs in ranked
        ],
        "total_usd": _money(sum(totals.values(), Decimal(0))),
    }


def _budgets(now: datetime) -> list[dict]:
    """Every enabled budget's current window and forecast, as the budget admin shows them."""
    budgets = Budget.objects.filter(enabled=True).select_related("user").order_by("id")
    return [
        {
            "id": status.budget.id,
            "name": status.budget.name,
            "period": status.budget.period,
            "limit_usd": _money(status.budget.limit_usd),
            "spent_usd": _money(status.usage.spent_usd),
            "reserved_usd": _money(status.usage.reserved_usd),
            "percent_used": float(status.usage.percent_used),
            "soft_alert_percent": status.budget.soft_alert_percent,
            "exhausted": status.usage.exhausted,
            "window_end": status.usage.window_end,
            "projected_spend_usd": _money(status.forecast.projected_spend_usd),
            "projected_exhaustion_at": status.forecast.projected_exhaustion_at,
            "url": reverse("admin:ledger_budget_change", args=[status.budget.id]),
        }
        for status in budget_statuses(budgets=budgets[:MAX_BUDGETS], at=now)
    ]


def _breakers() -> dict:
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


def _recent_failures() -> dict:
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
                "url": reverse("admin:alerts_failurerecord_change", args=[record.id]),
                "job_url": reverse("admin:jobs_llmjob_change", args=[record.job_id]),
            }
            for record in records
        ],
    }


def _jobs_in_database() -> dict[str, int]:
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


# --- Redis: queues, workers, rq's registries ----------------------------------------------------


def _redis_panels() -> dict:
    try:
        return {
            "available": True,
            "error": None,
            "queues": [_queue_state(name) for name in QUEUE_NAMES],
            "workers": _workers(),
            "timings": {name: _rq_timings(name) for name in (DEFAULT_QUEUE, ALERTS_QUEUE)},
        }
    except RedisError as error:
        reason = f"Redis unavailable ({type(error).__name__})"
        return {"available": False, "error": reason, "queues": [], "workers": [], "timings": {}}


def _queue_state(name: str) -> dict:
    queue = django_rq.get_queue(name)
    waiting, oldest = oldest_wait_seconds(queue_name=name)
    return {
        "name": name,
        "waiting": waiting,
        "oldest_wait_seconds": _seconds(oldest),
        # cleanup=False: a page view only reads; rq's own maintenance cleans the registries.
        "scheduled": queue.scheduled_job_registry.get_job_count(cleanup=False),
        "running": queue.started_job_registry.get_job_count(cleanup=False),
        "failed_in_rq": queue.failed_job_registry.get_job_count(cleanup=False),
        "workers": Worker.count(queue=queue),
        "threshold_seconds": settings.ALERT_QUEUE_WAIT_THRESHOLDS.get(name),
    }


def _workers() -> list[dict]:
    """Every worker listening on one of our queues, and the job each is running (the LlmJob
    behind an llm RQ job, linked to its admin page)."""
    workers: dict[str, BaseWorker] = {}
    for name in QUEUE_NAMES:
        for worker in Worker.all(queue=django_rq.get_queue(name)):
            workers.setdefault(worker.name, worker)
    current = {name: worker.get_current_job_id() for name, worker in workers.items()}
    connection = django_rq.get_connection(LLM_QUEUE)
    running = {
        job.id: job
        for job in Job.fetch_many([i for i in current.values() if i], connection=connection)
        if job is not None
    }
    llm_job_ids = {rq_id: _llm_job_id(job) for rq_id, job in running.items()}
    llm_jobs = {
        str(row["id"]): row
        for row in LlmJob.objects.filter(id__in=[i for i in llm_job_ids.values() if i]).values(
            "id", "feature", "model", "status", "attempts"
        )
    }
    rows = []
    for name, worker in sorted(workers.items()):
        rq_job_id = current[name]
        job = running.get(rq_job_id) if rq_job_id else None
        llm_job = llm_jobs.get(llm_job_ids.get(rq_job_id) or "") if rq_job_id else None
        rows.append(
            {
                "name": name,
                "hostname": worker.hostname,
                "pid": worker.pid,
                "state": worker.get_state(),
                "queues": worker.queue_names(),
                "last_heartbeat": worker.last_heartbeat,
                "successful_jobs": worker.successful_job_count,
                "failed_jobs": worker.failed_job_count,
                "current": None
                if job is None
                else {
                    "rq_job_id": job.id,
                    "description": job.description,
                    "started_at": job.started_at,
                    "llm_job": None
                    if llm_job is None
                    else {
                        "id": str(llm_job["id"]),
                        "feature": llm_job["feature"],
                        "model": llm_job["model"],
                        "status": llm_job["status"],
                        "attempts": llm_job["attempts"],
                        "url": reverse("admin:jobs_llmjob_change", args=[llm_job["id"]]),
                    },
                },
            }
        )
    return rows


def _llm_job_id(job: Job) -> str | None:
    """The LlmJob an RQ job runs: ``run_llm_job(job_id)`` carries it as its one argument."""
    if job.func_name != RUN_LLM_JOB_TASK or not job.args:
        return None
    try:
        return str(uuid.UUID(str(job.args[0])))
    except ValueError:
        return None
