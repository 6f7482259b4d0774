"""The ops dashboard's numbers: the picture an operator opens first (``/admin/ops/dashboard/``).

``dashboard_data`` puts together the panels read from the database (``database.py``: aggregate
queries over covering indexes, nothing loaded to be counted) and those read from Redis
(``queues.py``: when Redis is down they say "Redis unavailable" and the rest is still served).
"""

from datetime import datetime

from django.utils import timezone

from jobs.selectors import deadline_attainment
from llmops.queues import AGENTS_QUEUE, ALERTS_QUEUE, DEFAULT_QUEUE
from ops.dashboard.database import (
    Window,
    breaker_states,
    budget_use,
    cost_in_window,
    cost_per_feature_per_day,
    failures_by_severity,
    initial_window_hours,
    jobs_in_database,
    llm_queue_timings,
    money,
    recent_dead_letters,
    spend_by_key,
    throughput_per_minute,
)
from ops.dashboard.defaults import COST_DAYS, DEFAULT_WINDOW_HOURS, REFRESH_SECONDS, WINDOW_HOURS
from ops.dashboard.pauses import pauses
from ops.dashboard.queues import redis_panels, unmeasured

__all__ = [
    "COST_DAYS",
    "DEFAULT_WINDOW_HOURS",
    "REFRESH_SECONDS",
    "WINDOW_HOURS",
    "Window",
    "dashboard_data",
    "initial_window_hours",
]


def dashboard_data(*, hours: int = DEFAULT_WINDOW_HOURS, now: datetime | None = None) -> dict:
    """Everything the page shows, as JSON-ready values (money as strings, times as datetimes)."""
    if hours not in WINDOW_HOURS:
        raise ValueError(f"hours must be one of {WINDOW_HOURS}, not {hours!r}")
    window = Window(hours, now or timezone.now())
    per_minute, severities = throughput_per_minute(window)
    redis = redis_panels()
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
            "attempts": sum(per_minute["attempts"]),
            "failed_attempts": sum(per_minute["failed_attempts"]),
            "completed_jobs": sum(per_minute["completed_jobs"]),
            "dead_lettered": sum(per_minute["dead_lettered"]),
            "cost_usd": money(cost_in_window(window)),
        },
        "throughput": per_minute,
        "timings": [llm_queue_timings(window)]
        + [
            redis["timings"].get(name) or unmeasured(name, redis["error"])
            for name in (DEFAULT_QUEUE, ALERTS_QUEUE, AGENTS_QUEUE)
        ],
        "failures": failures_by_severity(severities),
        "cost_per_day": cost_per_feature_per_day(window.now),
        "spend_by_key": spend_by_key(window.now),
        "budgets": budget_use(window.now),
        "deadlines": [
            {"feature": a.feature, "with_deadline": a.with_deadline, "met": a.met, "ratio": a.ratio}
            for a in deadline_attainment(since=window.since, until=window.now, now=window.now)
        ],
        "queues": {
            "available": redis["available"],
            "error": redis["error"],
            "queues": redis["queues"],
            "jobs_in_database": jobs_in_database(),
        },
        "workers": {
            "available": redis["available"],
            "error": redis["error"],
            "workers": redis["workers"],
        },
        "breakers": breaker_states(),
        "paused": pauses(),
        "recent_failures": recent_dead_letters(),
    }
