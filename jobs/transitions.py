"""The one after-commit hook every LlmJob transition ends in.

Each transition service in ``jobs/services.py`` calls ``transition_committed(job, transition)``
inside its transaction, which counts the job's new status for the metrics (ops/counters.py) in
that transaction; once that transaction commits, every subscriber registered with
``on_transition`` receives the job and the transition. The log line and WebSocket events
subscribe here, so no transition can forget one of them. A rolled-back transition
notifies nobody; a failing subscriber is logged and never fails the job or the other subscribers.

A subscriber registered with ``on_transition(..., in_transaction=True)`` runs instead inside the
transition's transaction, right after the metrics' count: what it writes commits or rolls back
with the transition (batch counters, the next step of a pipeline), and an exception it raises
rolls the transition back. Keep such subscribers to a few indexed statements.
"""

import logging
from collections.abc import Callable
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING

from django.db import transaction

from llmops.logs import log_context
from ops.counters import count_job_status

if TYPE_CHECKING:
    from jobs.models import LlmJob

__all__ = ["Subscriber", "Transition", "on_transition", "transition_committed"]

logger = logging.getLogger("jobs.transitions")


class Transition(StrEnum):
    SUBMITTED = "submitted"
    """queued: a new job"""
    CLAIMED = "claimed"
    """queued|retrying -> running: an attempt starts"""
    COMPLETED = "completed"
    """running -> completed (or retrying -> completed: a late result after a takeover)"""
    RETRY_SCHEDULED = "retry_scheduled"
    """running -> retrying: the attempt failed, the retry service chose a delayed retry"""
    DEAD_LETTERED = "dead_lettered"
    """running -> failed: fatal, or the class's retries are used up (a FailureRecord exists)"""
    CANCELLED = "cancelled"
    """queued|retrying -> cancelled"""
    REQUEUED = "requeued"
    """failed -> queued: from the DLQ, with a fresh retry budget"""
    RECOVERED = "recovered"
    """running -> retrying|failed: the reconciler found the worker gone mid-attempt"""


Subscriber = Callable[["LlmJob", Transition], None]

_subscribers: list[Subscriber] = []
_in_transaction: list[Subscriber] = []


def on_transition(subscriber: Subscriber, *, in_transaction: bool = False) -> Subscriber:
    """Register a subscriber; call it from an ``AppConfig.ready``. By default it runs after the
    transition commits (best effort); with ``in_transaction=True`` inside its transaction."""
    registry = _in_transaction if in_transaction else _subscribers
    if subscriber not in registry:
        registry.append(subscriber)
    return subscriber


def transition_committed(job: "LlmJob", transition: Transition) -> None:
    """Count the job's new status now, in the transition's transaction (the metrics' counters
    commit or roll back with it), and notify every subscriber once that transaction commits."""
    count_job_status(job)
    for subscriber in _in_transaction:
        subscriber(job, transition)
    transaction.on_commit(lambda: _notify(job, transition))


def _notify(job: "LlmJob", transition: Transition) -> None:
    # Every subscriber's log lines carry the job's fields, in the web process as in a worker.
    with log_context(
        job_id=str(job.id), feature=job.feature, model=job.model, attempt=job.attempts or None
    ):
        for subscriber in list(_subscribers):
            try:
                subscriber(job, transition)
            except Exception:
                # Best effort by design: the transition is committed whatever a subscriber does.
                logger.exception("transition subscriber %r failed for job %s", subscriber, job.id)


@on_transition
def log_transition(job: "LlmJob", transition: Transition) -> None:
    """One structured log line per transition: the job's life can be read from the logs."""
    logger.info(
        "job %s %s status=%s attempts=%s feature=%s model=%s cost_usd=%s error=%s",
        job.id,
        transition.value,
        job.status,
        job.attempts,
        job.feature,
        job.model,
        job.cost_usd,
        job.error_code or "-",
        extra={
            "transition": transition.value,
            "status": job.status,
            "error_code": job.error_code or None,
            # A service may have left an F() expression here; only a number is worth a field.
            "cost_usd": job.cost_usd if isinstance(job.cost_usd, Decimal | int) else None,
        },
    )
