"""Alert services: what to send and when. Raise (deduplicated), resolve, and make up for lost jobs.

Flow: ``failure_record_create`` (dlq/) calls ``failure_recorded_hook``, which enqueues
``alerts.tasks.alert_for_failure`` after commit ->
``alert_raise_for_failure`` folds or records an ``Alert`` with one ``AlertDelivery`` per
destination, which ``alerts/dispatch.py`` delivers. When a DLQ service takes a record out of
``open``, ``failure_handled_hook`` enqueues ``alerts.tasks.failure_fingerprint_check`` after
commit -> ``alert_resolve_failure_if_handled`` resolves the incident once none of the
fingerprint's records is open. Each ``monitor_queues`` pass runs
``alert_failure_incidents_check`` in case Redis lost that check (and, from ``alerts/dispatch.py``,
``alert_failures_resume`` in case it lost an ``alert_for_failure`` job).

Deduplication and incident state live in one ``AlertFingerprint`` row per fingerprint, locked
with ``select_for_update``: concurrent workers serialise on it, so exactly one of them sends.
Every path that locks a ``FailureRecord`` too locks it first, then the fingerprint.
"""

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from alerts.destinations import Destination, destinations_for
from alerts.dispatch import deliveries_enqueue, failure_alert_enqueue, failure_check_enqueue
from alerts.models import Alert, AlertDelivery, AlertFingerprint
from dlq.models import FailureRecord

__all__ = [
    "alert_create",
    "alert_failure_incidents_check",
    "alert_raise",
    "alert_raise_for_failure",
    "alert_resolve_failure_if_handled",
    "condition_alert_update",
    "failure_fingerprint",
    "failure_handled_hook",
    "failure_record_fingerprint",
    "failure_recorded_hook",
    "fingerprint_ensure",
    "fingerprint_lock",
    "trigger_destinations",
]

logger = logging.getLogger(__name__)


def failure_fingerprint(*, severity: str, reason_code: str, feature: str, model: str) -> str:
    return f"failure:{severity}:{reason_code}:{feature}:{model}"[:255]


def _failure_feature_model(failure: FailureRecord) -> tuple[str, str]:
    # The request snapshot is the job as it was dead-lettered; requeuing on another model
    # changes the job's model afterwards, and the resolve must find the trigger's incident.
    snapshot = failure.request_snapshot if isinstance(failure.request_snapshot, dict) else {}
    feature = snapshot.get("feature") or failure.job.feature
    model = snapshot.get("model") or failure.job.model
    return str(feature), str(model)


def failure_record_fingerprint(*, failure: FailureRecord) -> str:
    feature, model = _failure_feature_model(failure)
    return failure_fingerprint(
        severity=failure.severity, reason_code=failure.reason_code, feature=feature, model=model
    )


def _fold_suffix(count: int, since: datetime | None) -> str:
    if not count:
        return ""
    when = timezone.localtime(since).strftime("%H:%M") if since else "?"
    return f" (+{count} similar since {when})"


def fingerprint_ensure(*, fingerprint: str, severity: str) -> None:
    """Make sure the fingerprint's row exists, in a short transaction of its own.

    Not inside the locking transaction: on InnoDB, workers that lose a duplicate-key race keep
    a shared lock on the row until their transaction ends, and two of them then asking for the
    exclusive lock deadlock. Here the loser's transaction ends at once and it reads the row.
    """
    AlertFingerprint.objects.get_or_create(fingerprint=fingerprint, defaults={"severity": severity})


def fingerprint_lock(*, fingerprint: str) -> AlertFingerprint:
    """The fingerprint's row, locked until the surrounding transaction ends: concurrent workers
    queue here, so each sees what the previous one decided."""
    return AlertFingerprint.objects.select_for_update().get(fingerprint=fingerprint)


def alert_create(
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
    transaction.on_commit(lambda: deliveries_enqueue(delivery_ids=delivery_ids), robust=True)
    return alert


def condition_alert_update(
    *,
    fingerprint: str,
    severity: str,
    decide: Callable[[AlertFingerprint], Alert | None],
    now: datetime | None = None,
) -> Alert | None:
    """The one skeleton of every condition alert (queue wait, loop stalled, retry overdue): it
    triggers once when the condition starts and resolves once when it ends.

    ``decide(state)`` runs under the fingerprint's row lock, reads what it needs afresh, and
    returns the trigger or the resolve it created with ``alert_create``, or None. Concurrent
    monitors queue on the lock, so each sees what the previous one decided.
    """
    fingerprint_ensure(fingerprint=fingerprint, severity=severity)
    with transaction.atomic():
        state = fingerprint_lock(fingerprint=fingerprint)
        alert = decide(state)
        now = now or timezone.now()
        if alert is not None:
            state.active = alert.action == Alert.Action.TRIGGER
            state.last_alert, state.last_sent_at = alert, now
        state.last_seen_at = now
        state.save()
    return alert


def trigger_destinations(*, trigger: Alert | None, severity: str) -> list[Destination]:
    """Where a resolve goes: where its trigger went (same PagerDuty key, same channel), even if
    the routes were edited in between; the current routes only if the trigger is gone."""
    if trigger is None:
        return destinations_for(severity=severity)
    return [Destination(d.kind, d.target, d.route_id) for d in trigger.deliveries.all()]


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
    fingerprint_ensure(fingerprint=fingerprint, severity=severity)
    with transaction.atomic():
        return _alert_raise_locked(
            fingerprint=fingerprint,
            severity=severity,
            title=title,
            body=body,
            source=source,
            details=details or {},
            failure=failure,
        )


def _alert_raise_locked(
    *,
    fingerprint: str,
    severity: str,
    title: str,
    body: str,
    source: str,
    details: dict[str, Any],
    failure: FailureRecord | None,
) -> Alert | None:
    state = fingerprint_lock(fingerprint=fingerprint)
    now = timezone.now()
    window = timedelta(seconds=settings.ALERT_DEDUP_SECONDS)
    # Fold only into an incident still open: once it was resolved, the next occurrence is a new
    # incident and must page at once, whatever the window says.
    if state.active and state.last_sent_at is not None and now - state.last_sent_at < window:
        state.folded_count += 1
        state.last_seen_at = now
        state.save(update_fields=["folded_count", "last_seen_at"])
        if state.last_alert_id:
            Alert.objects.filter(id=state.last_alert_id).update(repeat_count=F("repeat_count") + 1)
        logger.info("alert %s folded into alert %s", fingerprint, state.last_alert_id)
        return None

    folded, since = state.folded_count, state.last_sent_at
    suffix = _fold_suffix(folded, since)
    if suffix:
        body = f"{body}\n\n{suffix.strip()}: sent once per window."
    alert = alert_create(
        fingerprint=fingerprint,
        severity=severity,
        action=Alert.Action.TRIGGER,
        source=source,
        title=f"{title}{suffix}",
        body=body,
        details=details,
        destinations=destinations_for(severity=severity),
        failure=failure,
        folded_count=folded,
        folded_since=since if folded else None,
    )
    state.severity, state.last_alert, state.active = severity, alert, True
    state.last_sent_at, state.last_seen_at, state.folded_count = now, now, 0
    state.save()
    logger.info("alert %s raised (%s %s)", alert.id, severity, fingerprint)
    return alert


def alert_raise_for_failure(*, failure: FailureRecord) -> Alert | None:
    """The alert for a dead-lettered job, at the failure's severity; counts each record once.

    Returns the Alert sent, or None when the occurrence was folded into the open incident, was
    counted already (a duplicate or resumed task), or staff requeued or closed the record before
    its alert ran: they are on it, and a trigger then would open an incident nothing resolves.
    """
    feature, model = _failure_feature_model(failure)
    fingerprint = failure_fingerprint(
        severity=failure.severity, reason_code=failure.reason_code, feature=feature, model=model
    )
    fingerprint_ensure(fingerprint=fingerprint, severity=failure.severity)
    with transaction.atomic():
        # A second copy of the task waits on this lock, then finds alerted_at set.
        record = FailureRecord.objects.select_for_update().get(id=failure.id)
        if record.alerted_at is not None or record.state != FailureRecord.State.OPEN:
            logger.info("failure %s: alerted already or no longer open", record.id)
            return None
        exhausted = " (retries exhausted)" if record.retries_exhausted else ""
        lines = [
            f"Job {record.job_id} dead-lettered: {record.reason_code}{exhausted}",
            f"feature: {feature}   model: {model}",
            f"HTTP status: {record.http_status or '-'}   error type: {record.error_type or '-'}",
            f"attempts: {record.attempts}   request id: {record.request_id or '-'}",
            f"DLQ record: #{record.id}",
        ]
        if record.message:
            lines += ["", record.message[:1000]]
        alert = _alert_raise_locked(
            fingerprint=fingerprint,
            severity=record.severity,
            title=f"{record.reason_code}: {feature} on {model}",
            body="\n".join(lines),
            source="failure",
            details={
                "reason_code": record.reason_code,
                "feature": feature,
                "model": model,
                "http_status": record.http_status,
                "job_id": str(record.job_id),
                "failure_id": record.id,
                "request_id": record.request_id,
                "retries_exhausted": record.retries_exhausted,
            },
            failure=record,
        )
        record.alerted_at = timezone.now()
        record.save(update_fields=["alerted_at"])
    return alert


def failure_recorded_hook(failure: FailureRecord) -> None:
    """Subscribed to the DLQ (alerts/apps.py): called in the transaction that writes a job's
    record. The alert is raised on the alerts queue after commit: never inside the LLM job,
    never for a rolled-back record. robust: a Redis error must not fail a job already committed
    failed; the monitor's ``alert_failures_resume`` finds the record unalerted and enqueues it
    again."""
    failure_id = failure.id
    transaction.on_commit(lambda: failure_alert_enqueue(failure_id=failure_id), robust=True)


def failure_handled_hook(failure: FailureRecord) -> None:
    """Subscribed to the DLQ (alerts/apps.py): called in the transaction that takes a record out
    of ``open``.

    After commit, the alerts worker checks whether that was the fingerprint's last open record:
    never from the web request, never for a rolled-back change. robust: the staff action is
    committed; a check Redis lost is made up by the monitor's ``alert_failure_incidents_check``.
    """
    fingerprint = failure_record_fingerprint(failure=failure)
    transaction.on_commit(lambda: failure_check_enqueue(fingerprint=fingerprint), robust=True)


def _failures_open(*, fingerprint: str, trigger: Alert | None) -> bool:
    open_records = FailureRecord.objects.filter(state=FailureRecord.State.OPEN)
    details = trigger.details if trigger is not None else {}
    if trigger is not None and {"reason_code", "feature", "model"} <= details.keys():
        # An open record's job still has the model it failed on: only failure_requeue changes
        # it, and that takes the record out of open.
        return open_records.filter(
            severity=trigger.severity,
            reason_code=details["reason_code"],
            job__feature=details["feature"],
            job__model=details["model"],
        ).exists()
    # No trigger to read: compare whole fingerprints (they may be cut at 255 characters).
    _, severity, reason_code, _ = (fingerprint.split(":", 3) + ["", "", ""])[:4]
    pairs = (
        open_records.filter(severity=severity, reason_code=reason_code)
        .values_list("job__feature", "job__model")
        .distinct()
    )
    return any(
        failure_fingerprint(severity=severity, reason_code=reason_code, feature=f, model=m)
        == fingerprint
        for f, m in pairs
    )


def alert_resolve_failure_if_handled(*, fingerprint: str) -> Alert | None:
    """Resolve a failure fingerprint's incident once none of its DLQ records is open.

    Decided under the fingerprint's row lock, after the records' changes committed: a failure
    dead-lettered meanwhile is either seen open here (no resolve) or alerted after us, opening
    a new incident. Returns the resolve sent, or None.
    """
    with transaction.atomic():
        state = AlertFingerprint.objects.select_for_update().filter(fingerprint=fingerprint).first()
        # Not active: never triggered, or resolved already (by a duplicate check).
        if state is None or not state.active:
            return None
        trigger = state.last_alert
        if _failures_open(fingerprint=fingerprint, trigger=trigger):
            return None
        details = trigger.details if trigger is not None else {}
        about = (
            f"{details['reason_code']}: {details['feature']} on {details['model']}"
            if {"reason_code", "feature", "model"} <= details.keys()
            else fingerprint
        )
        body = "Every dead-lettered job of this kind was requeued, resolved or ignored."
        if state.folded_count:
            when = timezone.localtime(state.last_sent_at).strftime("%H:%M")
            body += f"\n{state.folded_count} similar failures since {when} were folded into it."
        now = timezone.now()
        alert = alert_create(
            fingerprint=fingerprint,
            severity=state.severity,
            action=Alert.Action.RESOLVE,
            source="failure",
            title=f"Cleared: {about}",
            body=body,
            details={k: details[k] for k in ("reason_code", "feature", "model") if k in details},
            destinations=trigger_destinations(trigger=trigger, severity=state.severity),
            folded_count=state.folded_count,
            folded_since=state.last_sent_at if state.folded_count else None,
        )
        state.active, state.last_alert, state.folded_count = False, alert, 0
        state.last_sent_at, state.last_seen_at = now, now
        state.save()
    logger.info("failure alert %s resolved (alert %s)", fingerprint, alert.id)
    return alert


def alert_failure_incidents_check() -> int:
    """Check every open failure incident and resolve those whose records are all handled;
    returns how many. Makes up for a ``failure_fingerprint_check`` job that Redis lost."""
    active = AlertFingerprint.objects.filter(active=True, fingerprint__startswith="failure:")
    fingerprints = list(active.values_list("fingerprint", flat=True))
    return sum(
        alert_resolve_failure_if_handled(fingerprint=fingerprint) is not None
        for fingerprint in fingerprints
    )
