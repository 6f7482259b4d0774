"""Alert services: raise (deduplicated), resolve, and deliver one attempt to one destination.

Flow: ``failure_record_create`` enqueues ``alerts.tasks.alert_for_failure`` after commit ->
``alert_raise_for_failure`` folds or records an ``Alert`` with one ``AlertDelivery`` per
destination -> after commit, one ``alerts.tasks.deliver_alert`` RQ job per delivery ->
``alert_delivery_attempt`` sends, and on failure schedules the next attempt with
``enqueue_in`` until ``ALERT_RETRY_SCHEDULE`` is used up. ``alert_deliveries_resume`` (run by
``monitor_queues``) puts back deliveries whose RQ job Redis lost.

Deduplication state lives in one ``AlertFingerprint`` row per fingerprint, locked with
``select_for_update``: concurrent workers serialise on it, so exactly one of them sends.
"""

import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import django_rq
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from alerts.delivery import AlertMessage, DeliveryError, send
from alerts.models import Alert, AlertDelivery, AlertFingerprint, FailureRecord, Severity
from alerts.routing import Destination, destinations_for, redact_target, scrub

__all__ = [
    "ALERTS_QUEUE",
    "alert_deliveries_resume",
    "alert_delivery_attempt",
    "alert_raise",
    "alert_raise_for_failure",
    "failure_fingerprint",
    "queue_wait_alert_update",
]

logger = logging.getLogger(__name__)

ALERTS_QUEUE = "alerts"
DELIVER_TASK = "alerts.tasks.deliver_alert"
LOST_DELIVERY_GRACE_SECONDS = 300.0
"""A pending delivery this far past its due time lost its RQ job: far longer than a delivery job
may run (``_job_timeout``) plus the scheduler's poll, so a merely busy queue is rarely hit."""


def failure_fingerprint(*, severity: str, reason_code: str, feature: str, model: str) -> str:
    return f"failure:{severity}:{reason_code}:{feature}:{model}"[:255]


def _fold_suffix(count: int, since: datetime | None) -> str:
    if not count:
        return ""
    when = timezone.localtime(since).strftime("%H:%M") if since else "?"
    return f" (+{count} similar since {when})"


def _fingerprint_ensure(*, fingerprint: str, severity: str) -> None:
    """Make sure the fingerprint's row exists, in a short transaction of its own.

    Not inside the locking transaction: on InnoDB, workers that lose a duplicate-key race keep
    a shared lock on the row until their transaction ends, and two of them then asking for the
    exclusive lock deadlock. Here the loser's transaction ends at once and it reads the row.
    """
    AlertFingerprint.objects.get_or_create(fingerprint=fingerprint, defaults={"severity": severity})


def _fingerprint_locked(*, fingerprint: str) -> AlertFingerprint:
    """The fingerprint's row, locked until the surrounding transaction ends: concurrent workers
    queue here, so each sees what the previous one decided."""
    return AlertFingerprint.objects.select_for_update().get(fingerprint=fingerprint)


def _record_alert(
    *,
    fingerprint: str,
    severity: str,
    action: str,
    source: str,
    title: str,
    body: str,
    details: dict[str, Any],
    destinations: Sequence[Destination],
    failure: FailureRecord | None = None,
    folded_count: int = 0,
    folded_since: datetime | None = None,
) -> Alert:
    """Insert the alert and its deliveries; queue the deliveries once the transaction commits."""
    now = timezone.now()
    alert = Alert.objects.create(
        fingerprint=fingerprint,
        severity=severity,
        action=action,
        source=source,
        title=title[:300],
        body=body,
        details=details,
        failure=failure,
        destinations=[{"kind": d.kind, "target": d.redacted} for d in destinations],
        state=Alert.State.PENDING if destinations else Alert.State.UNROUTED,
        folded_count=folded_count,
        folded_since=folded_since,
        completed_at=None if destinations else now,
    )
    # One insert each, not bulk_create: MySQL (unlike MariaDB) returns no ids from a bulk insert.
    deliveries = [
        AlertDelivery.objects.create(
            alert=alert, route_id=d.route_id, kind=d.kind, target=d.target, next_attempt_at=now
        )
        for d in destinations
    ]
    if not destinations:
        logger.warning("alert %s (%s %s): no destination configured", alert.id, severity, title)
    delivery_ids = [d.id for d in deliveries]
    transaction.on_commit(lambda: _enqueue_deliveries(delivery_ids))
    return alert


def _enqueue_deliveries(delivery_ids: list[int], attempt: int = 1) -> None:
    queue = django_rq.get_queue(ALERTS_QUEUE)
    for delivery_id in delivery_ids:
        # One RQ job per destination: a slow or failing one never holds up the others.
        queue.enqueue(DELIVER_TASK, delivery_id, attempt, job_timeout=_job_timeout())


def alert_deliveries_resume(*, grace_seconds: float = LOST_DELIVERY_GRACE_SECONDS) -> int:
    """Enqueue again the pending deliveries whose attempt is long overdue: Redis lost the RQ
    job (flush, failover) or it was never pushed. Returns how many were resumed.

    The database is the source of truth; a duplicate of a job that was only late is harmless,
    because an attempt is claimed by (state, attempts) and the second copy sends nothing.
    """
    now = timezone.now()
    overdue = AlertDelivery.objects.filter(
        state=AlertDelivery.State.PENDING,
        next_attempt_at__lt=now - timedelta(seconds=grace_seconds),
    ).values_list("id", "attempts", "next_attempt_at")
    resumed = 0
    for delivery_id, attempts, due in overdue:
        # Conditional, so that two monitors resume a delivery once.
        if AlertDelivery.objects.filter(
            id=delivery_id,
            state=AlertDelivery.State.PENDING,
            attempts=attempts,
            next_attempt_at=due,
        ).update(next_attempt_at=now):
            _enqueue_deliveries([delivery_id], attempt=attempts + 1)
            resumed += 1
    if resumed:
        logger.warning("resumed %s alert deliveries whose RQ job was lost", resumed)
    return resumed


def _job_timeout() -> int:
    # httpx's timeout applies per phase (connect, write, read); leave room for all of them.
    return int(settings.ALERT_DELIVERY_TIMEOUT * 4) + 10


def alert_raise(
    *,
    fingerprint: str,
    severity: str,
    title: str,
    body: str,
    source: str,
    details: dict[str, Any] | None = None,
    failure: FailureRecord | None = None,
) -> Alert | None:
    """Send an alert unless the same fingerprint was sent within ALERT_DEDUP_SECONDS.

    Returns the new Alert, or None when the occurrence was folded into the previous one. The
    next alert after the window carries the number folded in, in its title, body and field.
    """
    _fingerprint_ensure(fingerprint=fingerprint, severity=severity)
    with transaction.atomic():
        state = _fingerprint_locked(fingerprint=fingerprint)
        now = timezone.now()
        window = timedelta(seconds=settings.ALERT_DEDUP_SECONDS)
        if state.last_sent_at is not None and now - state.last_sent_at < window:
            state.folded_count += 1
            state.last_seen_at = now
            state.save(update_fields=["folded_count", "last_seen_at"])
            if state.last_alert_id:
                Alert.objects.filter(id=state.last_alert_id).update(
                    repeat_count=F("repeat_count") + 1
                )
            logger.info("alert %s folded into alert %s", fingerprint, state.last_alert_id)
            return None

        folded, since = state.folded_count, state.last_sent_at
        suffix = _fold_suffix(folded, since)
        if suffix:
            body = f"{body}\n\n{suffix.strip()}: sent once per window."
        alert = _record_alert(
            fingerprint=fingerprint,
            severity=severity,
            action=Alert.Action.TRIGGER,
            source=source,
            title=f"{title}{suffix}",
            body=body,
            details=details or {},
            destinations=destinations_for(severity=severity),
            failure=failure,
            folded_count=folded,
            folded_since=since if folded else None,
        )
        state.severity, state.last_alert = severity, alert
        state.last_sent_at, state.last_seen_at, state.folded_count = now, now, 0
        state.save()
    logger.info("alert %s raised (%s %s)", alert.id, severity, fingerprint)
    return alert


def alert_raise_for_failure(*, failure: FailureRecord) -> Alert | None:
    """The alert for a dead-lettered job, at the failure's severity."""
    job = failure.job
    exhausted = " (retries exhausted)" if failure.retries_exhausted else ""
    lines = [
        f"Job {job.id} dead-lettered: {failure.reason_code}{exhausted}",
        f"feature: {job.feature}   model: {job.model}",
        f"HTTP status: {failure.http_status or '-'}   error type: {failure.error_type or '-'}",
        f"attempts: {failure.attempts}   request id: {failure.request_id or '-'}",
        f"DLQ record: #{failure.id}",
    ]
    if failure.message:
        lines += ["", failure.message[:1000]]
    return alert_raise(
        fingerprint=failure_fingerprint(
            severity=failure.severity,
            reason_code=failure.reason_code,
            feature=job.feature,
            model=job.model,
        ),
        severity=failure.severity,
        title=f"{failure.reason_code}: {job.feature} on {job.model}",
        body="\n".join(lines),
        source="failure",
        details={
            "reason_code": failure.reason_code,
            "feature": job.feature,
            "model": job.model,
            "http_status": failure.http_status,
            "job_id": str(job.id),
            "failure_id": failure.id,
            "request_id": failure.request_id,
            "retries_exhausted": failure.retries_exhausted,
        },
        failure=failure,
    )


def queue_wait_alert_update(
    *, queue_name: str, oldest_wait_seconds: float | None, threshold_seconds: float
) -> Alert | None:
    """Raise a WARNING when a queue's oldest job waits too long; resolve it once it clears.

    A condition, not an event: it alerts once when it starts and once when it ends, never
    while it lasts. Returns the alert sent (trigger or resolve), or None.
    """
    fingerprint = f"queue_wait:{queue_name}"
    _fingerprint_ensure(fingerprint=fingerprint, severity=Severity.WARNING)
    with transaction.atomic():
        return _queue_wait_decide(
            fingerprint=fingerprint,
            queue_name=queue_name,
            oldest_wait_seconds=oldest_wait_seconds,
            threshold_seconds=threshold_seconds,
        )


def _queue_wait_decide(
    *,
    fingerprint: str,
    queue_name: str,
    oldest_wait_seconds: float | None,
    threshold_seconds: float,
) -> Alert | None:
    state = _fingerprint_locked(fingerprint=fingerprint)
    over = oldest_wait_seconds is not None and oldest_wait_seconds > threshold_seconds
    now = timezone.now()
    details = {
        "queue": queue_name,
        "oldest_wait_seconds": round(oldest_wait_seconds or 0.0, 1),
        "threshold_seconds": threshold_seconds,
    }
    if over and not state.active:
        assert oldest_wait_seconds is not None
        alert = _record_alert(
            fingerprint=fingerprint,
            severity=Severity.WARNING,
            action=Alert.Action.TRIGGER,
            source="queue_health",
            title=f"Queue {queue_name}: oldest job waiting {oldest_wait_seconds:.0f}s",
            body=(
                f"The oldest job on the {queue_name} queue has waited "
                f"{oldest_wait_seconds:.1f}s, over the {threshold_seconds:g}s threshold. "
                "Workers are missing, stuck or outpaced."
            ),
            details=details,
            destinations=destinations_for(severity=Severity.WARNING),
        )
        state.active, state.last_alert, state.last_sent_at = True, alert, now
    elif not over and state.active:
        trigger = state.last_alert
        # The resolve goes where the trigger went (same PagerDuty key, same channel), even if
        # the routes were edited in between.
        destinations = (
            [Destination(d.kind, d.target, d.route_id) for d in trigger.deliveries.all()]
            if trigger is not None
            else destinations_for(severity=Severity.WARNING)
        )
        alert = _record_alert(
            fingerprint=fingerprint,
            severity=Severity.WARNING,
            action=Alert.Action.RESOLVE,
            source="queue_health",
            title=f"Cleared: queue {queue_name} is back under {threshold_seconds:g}s",
            body=(
                f"The {queue_name} queue's oldest job wait is back under the "
                f"{threshold_seconds:g}s threshold."
            ),
            details=details,
            destinations=destinations,
        )
        state.active, state.last_alert, state.last_sent_at = False, alert, now
    else:
        alert = None
    state.last_seen_at = now
    state.save()
    if alert is not None:
        logger.info("queue %s wait alert %s: %s", queue_name, alert.id, alert.action)
    return alert


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
    claimed = AlertDelivery.objects.filter(
        id=delivery_id, state=AlertDelivery.State.PENDING, attempts=attempt - 1
    ).update(attempts=attempt)
    if not claimed:
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
    now = timezone.now()
    delivery = AlertDelivery.objects.select_for_update().get(id=delivery.id)
    entry = {"attempt": attempt, "at": now.isoformat(), "ok": error is None, "ms": elapsed_ms}
    if error is not None:
        entry["error"] = str(error)[:500]
        delivery.last_error = str(error)[:2000]
    delivery.history = [*delivery.history, entry]
    if error is None:
        delivery.state, delivery.delivered_at = AlertDelivery.State.DELIVERED, now
        delivery.next_attempt_at = None
    elif retry_in is None:
        delivery.state, delivery.next_attempt_at = AlertDelivery.State.FAILED, None
    else:
        delivery.next_attempt_at = now + timedelta(seconds=retry_in)
    delivery.save(
        update_fields=["state", "delivered_at", "last_error", "history", "next_attempt_at"]
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
        alert.completed_at = now
    alert.save(update_fields=["attempts", "last_error", "state", "completed_at"])

    if retry_in is not None:
        delay, next_attempt, delivery_id = retry_in, attempt + 1, delivery.id

        def schedule_retry() -> None:
            # Our own retries, like the LLM jobs': the alerts worker's scheduler runs it when due.
            django_rq.get_queue(ALERTS_QUEUE).enqueue_in(
                timedelta(seconds=delay),
                DELIVER_TASK,
                delivery_id,
                next_attempt,
                job_timeout=_job_timeout(),
            )

        transaction.on_commit(schedule_retry)
        return "retrying"
    return "delivered" if error is None else "failed"
