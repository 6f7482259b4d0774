"""The one after-commit hook every LlmJob transition ends in.

Each transition service in ``jobs/services/`` calls ``transition_committed(job, transition)``
inside its transaction; once that transaction commits, every subscriber registered with
``on_transition`` receives the job and the transition. The log line and WebSocket events
subscribe here, so no transition can forget one of them. A rolled-back transition
notifies nobody; a failing subscriber is logged and never fails the job or the other subscribers.

A subscriber registered with ``on_transition(..., in_transaction=True)`` runs instead inside the
transition's transaction, in the order of registration: what it writes commits or rolls back
with the transition (the metrics' counters, batch counters, the next step of a pipeline), and an
exception it raises rolls the transition back. Keep such subscribers to a few indexed statements.

Many jobs making one transition in one transaction (a batch's submit, jobs/bulk.py) end in
``transitions_committed`` instead: each subscriber registered with a ``many`` form receives
them all at once (in the transaction: the metrics count them in one statement per label set;
after commit: one log line per few hundred jobs, no per-job live event); one without it is
called once per job.
"""

import logging
from collections.abc import Callable, Sequence
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING

from django.db import transaction

from llmops.logs import log_context

if TYPE_CHECKING:
    from jobs.models import LlmJob

__all__ = [
    "ManySubscriber",
    "Subscriber",
    "Transition",
    "on_transition",
    "transition_committed",
    "transitions_committed",
]

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
ManySubscriber = Callable[[Sequence["LlmJob"], Transition], None]

_subscribers: list[Subscriber] = []
_in_transaction: list[Subscriber] = []
_many_forms: dict[Subscriber, ManySubscriber] = {}
_in_transaction_many_forms: dict[Subscriber, ManySubscriber] = {}


def on_transition(
    subscriber: Subscriber, *, in_transaction: bool = False, many: ManySubscriber | None = None
) -> Subscriber:
    """Register a subscriber; call it from an ``AppConfig.ready``. By default it runs after the
    transition commits (best effort); with ``in_transaction=True`` inside its transaction.
    ``many``: its form for the many jobs of a ``transitions_committed``."""
    registry = _in_transaction if in_transaction else _subscribers
    if subscriber not in registry:
        registry.append(subscriber)
    if many is not None:
        (_in_transaction_many_forms if in_transaction else _many_forms)[subscriber] = many
    return subscriber


def transition_committed(job: "LlmJob", transition: Transition) -> None:
    """Call the in-transaction subscribers now, in the transition's transaction, and notify every
    other subscriber once that transaction commits."""
    for subscriber in _in_transaction:
        subscriber(job, transition)
    transaction.on_commit(lambda: _notify(job, transition))


def transitions_committed(jobs: Sequence["LlmJob"], transition: Transition) -> None:
    """``transition_committed`` for many jobs making the same transition in one transaction:
    each subscriber's ``many`` form, where it has one, instead of a call per job (in the
    transaction: the metrics' one counter statement per label set instead of one per job)."""
    jobs = list(jobs)
    if not jobs:
        return
    for subscriber in _in_transaction:
        many = _in_transaction_many_forms.get(subscriber)
        if many is not None:
            many(jobs, transition)
            continue
        for job in jobs:
            subscriber(job, transition)
    transaction.on_commit(lambda: _notify_many(jobs, transition))


def _notify_many(jobs: list["LlmJob"], transition: Transition) -> None:
    for subscriber in list(_subscribers):
        many = _many_forms.get(subscriber)
        if many is None:
            for job in jobs:
                _notify_one(subscriber, job, transition)
            continue
        try:
            many(jobs, transition)
        except Exception:
            logger.exception("transition subscriber %r failed for %s jobs", many, len(jobs))


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


def _notify_one(subscriber: Subscriber, job: "LlmJob", transition: Transition) -> None:
    with log_context(
        job_id=str(job.id), feature=job.feature, model=job.model, attempt=job.attempts or None
    ):
        try:
            subscriber(job, transition)
        except Exception:
            logger.exception("transition subscriber %r failed for job %s", subscriber, job.id)


LOG_LINE_JOBS = 200
"""Job ids per log line of a bulk transition: a line stays under 8 KB (log shippers cut longer
ones), and ``grep <job id>`` still finds the job's first transition."""


def log_transitions(jobs: Sequence["LlmJob"], transition: Transition) -> None:
    """The many-jobs form of ``log_transition``: per feature, model and status, one line per
    ``LOG_LINE_JOBS`` jobs, listing their ids (a field of its own in the JSON logs)."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for job in jobs:
        groups.setdefault((job.feature, job.model, job.status), []).append(str(job.id))
    for (feature, model, status), ids in groups.items():
        for start in range(0, len(ids), LOG_LINE_JOBS):
            chunk = ids[start : start + LOG_LINE_JOBS]
            logger.info(
                "%s jobs %s status=%s feature=%s model=%s (%s-%s of %s): %s",
                len(chunk),
                transition.value,
                status,
                feature,
                model,
                start + 1,
                start + len(chunk),
                len(ids),
                " ".join(chunk),
                extra={
                    "transition": transition.value,
                    "status": status,
                    "feature": feature,
                    "model": model,
                },
            )


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


on_transition(log_transition, many=log_transitions)
