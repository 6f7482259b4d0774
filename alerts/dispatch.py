"""The RQ side of alerting: the jobs on the ``alerts`` queue, delivery attempts and retries,
and putting back the jobs Redis lost.

``alerts.notifications`` decides what to send and records an ``Alert`` with one ``AlertDelivery``
per destination; from there ``deliveries_enqueue`` (after commit) puts one
``alerts.tasks.deliver_alert`` RQ job per delivery on the ``alerts`` queue ->
``alert_delivery_attempt`` sends, and on failure schedules the next attempt with ``enqueue_in``
until ``ALERT_RETRY_SCHEDULE`` is used up. Each ``monitor_queues`` pass runs
``alert_deliveries_resume`` (deliveries whose RQ job Redis lost) and ``alert_failures_resume``
(dead-lettered jobs whose ``alert_for_failure`` job it lost): the database is the source of truth
for alerts too.
"""

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import django_rq
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.delivery import AlertMessage, DeliveryError, send
from alerts.models import Alert, AlertDelivery
from alerts.targets import redact_target, scrub
from dlq.models import FailureRecord
from llmops.queues import (
    ALERT_FOR_FAILURE_TASK,
    ALERTS_QUEUE,
    DELIVER_ALERT_TASK,
    FINGERPRINT_CHECK_TASK,
    alert_for_failure_job_id,
)
from runtime.rq_jobs import rq_jobs_resume

__all__ = [
    "alert_deliveries_resume",
    "alert_delivery_attempt",
    "alert_failures_resume",
    "deliveries_enqueue",
    "failure_alert_enqueue",
    "failure_check_enqueue",
]

logger = logging.getLogger(__name__)

LOST_DELIVERY_GRACE_SECONDS = 300.0
"""A pending delivery this far past its due time lost its RQ job: far longer than a delivery job
may run (``_job_timeout``) plus the scheduler's poll, so a merely busy queue is rarely hit."""
UNALERTED_FAILURE_GRACE_SECONDS = 120.0
"""A failure still unalerted this long after it was created lost its alert job: the alerts worker
needs milliseconds per failure, so only a Redis flush or failover, or an alerts worker stopped
for minutes, leaves one this late (and a job still waiting in Redis is left alone)."""


def deliveries_enqueue(*, delivery_ids: list[int], attempt: int = 1) -> None:
    queue = django_rq.get_queue(ALERTS_QUEUE)
    for delivery_id in delivery_ids:
        # One RQ job per destination: a slow or failing one never holds up the others.
        queue.enqueue(DELIVER_ALERT_TASK, delivery_id, attempt, job_timeout=_job_timeout())


def alert_deliveries_resume(*, grace_seconds: float = LOST_DELIVERY_GRACE_SECONDS) -> int:
    """Enqueue again the pending deliveries whose attempt is long overdue: Redis lost the RQ
    job (flush, failover) or it was never pushed. Returns how many were resumed."""
    return overdue_deliveries_resume(
        AlertDelivery,
        grace_seconds=grace_seconds,
        enqueue=lambda delivery_id, attempt: deliveries_enqueue(
            delivery_ids=[delivery_id], attempt=attempt
        ),
        what="alert deliveries",
    )


def delivery_claim(model: Any, *, delivery_id: int, attempt: int) -> bool:
    """Claim attempt ``attempt`` of a pending row of a delivery ``model`` (alert deliveries,
    batch callbacks): an atomic conditional update on (state, attempts), so a duplicate copy of
    the RQ job, or one that arrives after the delivery finished, sends nothing."""
    return bool(
        model.objects.filter(
            id=delivery_id, state=model.State.PENDING, attempts=attempt - 1
        ).update(attempts=attempt)
    )


def delivery_attempt_apply(
    delivery: Any,
    *,
    attempt: int,
    error: DeliveryError | None,
    elapsed_ms: int,
    retry_in: float | None,
    **entry: Any,
) -> list[str]:
    """Record attempt ``attempt`` on a locked row of a delivery model (alert deliveries,
    webhook deliveries: ``state``, ``delivered_at``, ``last_error``, ``history``,
    ``next_attempt_at``): its history entry (``entry`` adds fields to it), delivered, failed
    for good (``retry_in`` None) or due again in ``retry_in`` s. Returns the fields changed,
    for ``save(update_fields=...)``."""
    now = timezone.now()
    record = {"attempt": attempt, "at": now.isoformat(), "ok": error is None, **entry}
    record["ms"] = elapsed_ms
    if error is not None:
        record["error"] = str(error)[:500]
        delivery.last_error = str(error)[:2000]
    delivery.history = [*delivery.history, record]
    if error is None:
        delivery.state, delivery.delivered_at = delivery.State.DELIVERED, now
        delivery.next_attempt_at = None
    elif retry_in is None:
        delivery.state, delivery.next_attempt_at = delivery.State.FAILED, None
    else:
        delivery.next_attempt_at = now + timedelta(seconds=retry_in)
    return ["state", "delivered_at", "last_error", "history", "next_attempt_at"]


def overdue_deliveries_resume(
    model: Any, *, grace_seconds: float, enqueue: Callable[[Any, int], None], what: str
) -> int:
    """Enqueue again the pending rows of a delivery ``model`` (``state``, ``attempts``,
    ``next_attempt_at``: alert deliveries, batch callbacks) whose attempt is long overdue.

    The database is the source of truth; a duplicate of a job that was only late is harmless,
    because an attempt is claimed by (state, attempts) and the second copy sends nothing.
    """
    now = timezone.now()
    overdue = model.objects.filter(
        state=model.State.PENDING,
        next_attempt_at__lt=now - timedelta(seconds=grace_seconds),
    ).values_list("id", "attempts", "next_attempt_at")
    resumed = 0
    for delivery_id, attempts, due in overdue:
        # Conditional, so that two monitors resume a delivery once.
        if model.objects.filter(
            id=delivery_id, state=model.State.PENDING, attempts=attempts, next_attempt_at=due
        ).update(next_attempt_at=now):
            enqueue(delivery_id, attempts + 1)
            resumed += 1
    if resumed:
        logger.warning("resumed %s %s whose RQ job was lost", resumed, what)
    return resumed


def failure_alert_enqueue(*, failure_id: int) -> None:
    django_rq.get_queue(ALERTS_QUEUE).enqueue(
        ALERT_FOR_FAILURE_TASK, failure_id, job_id=alert_for_failure_job_id(failure_id)
    )


def failure_check_enqueue(*, fingerprint: str) -> None:
    django_rq.get_queue(ALERTS_QUEUE).enqueue(FINGERPRINT_CHECK_TASK, fingerprint)


def alert_failures_resume(*, grace_seconds: float = UNALERTED_FAILURE_GRACE_SECONDS) -> int:
    """Enqueue ``alert_for_failure`` again for the open failures never alerted whose alert job
    is gone from Redis (flush, failover) or died. Returns how many were enqueued.

    A job still waiting (alerts worker stopped or busy) is left alone, so passes do not pile up
    copies; a copy that runs anyway is harmless, since a record is alerted once.
    """
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    ids = list(
        FailureRecord.objects.filter(
            alerted_at__isnull=True, state=FailureRecord.State.OPEN, created_at__lt=cutoff
        )
        .order_by("id")
        .values_list("id", flat=True)
    )
    resumed = rq_jobs_resume(
        queue=django_rq.get_queue(ALERTS_QUEUE),
        ids=ids,
        job_id_for=alert_for_failure_job_id,
        enqueue=lambda failure_id: failure_alert_enqueue(failure_id=failure_id),
    )
    if resumed:
        logger.warning("re-enqueued the alert of %s failures whose RQ job was lost", resumed)
    return resumed


def _job_timeout() -> int:
    # httpx's timeout applies per phase (connect, write, read); leave room for all of them.
    return int(settings.ALERT_DELIVERY_TIMEOUT * 4) + 10


def _message_for(alert: Alert) -> AlertMessage:
    return AlertMessage(
        alert_id=alert.id,
        fingerprint=alert.fingerprint,
        severity=alert.severity,
        action=alert.action,
        title=alert.title,
        body=alert.body,
        source=alert.source,
        created_at=alert.created_at,
        details=alert.details,
        folded_count=alert.folded_count,
        folded_since=alert.folded_since,
    )


def alert_delivery_attempt(*, delivery_id: int, attempt: int) -> str:
    """Make attempt number ``attempt`` of one delivery. Returns the outcome, for the job log.

    The claim is an atomic conditional update on (state, attempts): a duplicate copy of the
    RQ job, or one that arrives after the delivery finished, sends nothing.
    """
    if not delivery_claim(AlertDelivery, delivery_id=delivery_id, attempt=attempt):
        logger.info("alert delivery %s attempt %s: already done or taken", delivery_id, attempt)
        return "skipped"
    delivery = AlertDelivery.objects.select_related("alert").get(id=delivery_id)
    where = redact_target(kind=delivery.kind, target=delivery.target)
    started = time.monotonic()
    error: DeliveryError | None = None
    try:
        send(kind=delivery.kind, target=delivery.target, message=_message_for(delivery.alert))
    except DeliveryError as exc:
        error = exc
    except Exception as exc:  # noqa: BLE001 - a sender bug must not lose the delivery record
        error = DeliveryError(scrub(f"{type(exc).__name__}: {exc}", target=delivery.target))
    elapsed_ms = int((time.monotonic() - started) * 1000)

    schedule = settings.ALERT_RETRY_SCHEDULE
    retry_in = None
    if error is not None and error.retryable and attempt <= len(schedule):
        retry_in = float(schedule[attempt - 1])
    outcome = _record_attempt(
        delivery=delivery, attempt=attempt, error=error, elapsed_ms=elapsed_ms, retry_in=retry_in
    )
    if error is None:
        logger.info("alert %s delivered to %s %s", delivery.alert_id, delivery.kind, where)
    elif retry_in is not None:
        logger.warning(
            "alert %s to %s %s failed (attempt %s: %s); retry in %ss",
            delivery.alert_id,
            delivery.kind,
            where,
            attempt,
            error,
            retry_in,
        )
    else:
        logger.error(
            "alert %s to %s %s failed for good after %s attempt(s): %s",
            delivery.alert_id,
            delivery.kind,
            where,
            attempt,
            error,
        )
    return outcome


@transaction.atomic
def _record_attempt(
    *,
    delivery: AlertDelivery,
    attempt: int,
    error: DeliveryError | None,
    elapsed_ms: int,
    retry_in: float | None,
) -> str:
    delivery = AlertDelivery.objects.select_for_update().get(id=delivery.id)
    delivery.save(
        update_fields=delivery_attempt_apply(
            delivery, attempt=attempt, error=error, elapsed_ms=elapsed_ms, retry_in=retry_in
        )
    )

    # Every delivery of the alert updates the same row: lock it so the roll-up is consistent.
    alert = Alert.objects.select_for_update().get(id=delivery.alert_id)
    states = list(alert.deliveries.values_list("state", flat=True))
    alert.attempts += 1
    if error is not None:
        where = redact_target(kind=delivery.kind, target=delivery.target)
        alert.last_error = f"{delivery.kind} {where}: {error}"[:2000]
    if AlertDelivery.State.PENDING not in states:
        delivered = states.count(AlertDelivery.State.DELIVERED)
        if delivered == len(states):
            alert.state = Alert.State.DELIVERED
        elif delivered:
            alert.state = Alert.State.PARTIAL
        else:
            alert.state = Alert.State.FAILED
        alert.completed_at = timezone.now()
    alert.save(update_fields=["attempts", "last_error", "state", "completed_at"])

    if retry_in is not None:
        delay, next_attempt, delivery_id = retry_in, attempt + 1, delivery.id

        def schedule_retry() -> None:
            # Our own retries, like the LLM jobs': the alerts worker's scheduler runs it when due.
            django_rq.get_queue(ALERTS_QUEUE).enqueue_in(
                timedelta(seconds=delay),
                DELIVER_ALERT_TASK,
                delivery_id,
                next_attempt,
                job_timeout=_job_timeout(),
            )

        transaction.on_commit(schedule_retry)
        return "retrying"
    return "delivered" if error is None else "failed"
