"""Queue health: how long the oldest job of each queue has waited, checked against thresholds.

Like Laravel Horizon's long-wait notification, per queue: the wait is read from the RQ queue
itself (its first job's ``enqueued_at``), because that is what a worker would pick up next.
A condition, not an event: it alerts once when it starts and once when it ends, with
hysteresis between the two levels so that a queue hovering at its threshold does not flap.
"""

import logging
from dataclasses import dataclass

import django_rq
from django.conf import settings
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.utils import now as rq_now

from alerts.destinations import destinations_for
from alerts.models import Alert, AlertFingerprint, Severity
from alerts.notifications import alert_create, condition_alert_update, trigger_destinations

__all__ = [
    "QUEUE_WAIT_SEVERITY",
    "QueueWait",
    "oldest_wait_seconds",
    "queue_health_check",
    "queue_wait_alert_update",
]

logger = logging.getLogger(__name__)

QUEUE_WAIT_SEVERITY = Severity.WARNING
"""A queue that waits too long warns; the Prometheus rule on the same wait uses the same."""

# Ids at the head of the list whose job hash expired or was deleted are skipped; looking a few
# deep is enough, since a worker drops such ids as it reaches them.
_HEAD_DEPTH = 5


@dataclass(frozen=True)
class QueueWait:
    queue: str
    waiting: int
    oldest_wait_seconds: float | None
    threshold_seconds: float
    alert: Alert | None

    @property
    def over(self) -> bool:
        return self.oldest_wait_seconds is not None and (
            self.oldest_wait_seconds > self.threshold_seconds
        )

    def __str__(self) -> str:
        wait = "-" if self.oldest_wait_seconds is None else f"{self.oldest_wait_seconds:.1f}s"
        sent = f", sent {self.alert.action} alert {self.alert.id}" if self.alert else ""
        return (
            f"{self.queue}: {self.waiting} waiting, oldest {wait} "
            f"(threshold {self.threshold_seconds:g}s){sent}"
        )


def oldest_wait_seconds(*, queue_name: str) -> tuple[int, float | None]:
    """(jobs waiting, seconds the first of them has waited); None when nothing waits."""
    queue = django_rq.get_queue(queue_name)
    waiting = queue.count
    for job_id in queue.get_job_ids(0, _HEAD_DEPTH):
        try:
            job = Job.fetch(job_id, connection=queue.connection, serializer=queue.serializer)
        except NoSuchJobError:
            continue
        if job.enqueued_at is not None:
            return waiting, max(0.0, (rq_now() - job.enqueued_at).total_seconds())
    return waiting, None


def queue_health_check(*, thresholds: dict[str, float] | None = None) -> list[QueueWait]:
    """Check every queue with a threshold; raise or resolve its wait alert as needed."""
    thresholds = settings.ALERT_QUEUE_WAIT_THRESHOLDS if thresholds is None else thresholds
    reports = []
    for queue_name, threshold in thresholds.items():
        waiting, wait = oldest_wait_seconds(queue_name=queue_name)
        alert = queue_wait_alert_update(
            queue_name=queue_name, oldest_wait_seconds=wait, threshold_seconds=threshold
        )
        reports.append(QueueWait(queue_name, waiting, wait, threshold, alert))
    return reports


def queue_wait_alert_update(
    *,
    queue_name: str,
    oldest_wait_seconds: float | None,
    threshold_seconds: float,
    clear_ratio: float | None = None,
) -> Alert | None:
    """Raise a WARNING when a queue's oldest job waits too long; resolve it once it clears.

    It triggers over ``threshold_seconds`` but resolves only once the wait is under
    ``clear_ratio`` (default ALERT_QUEUE_CLEAR_RATIO) times the threshold, or nothing waits:
    between the two levels nothing changes. Returns the alert sent (trigger or resolve), or None.
    """
    ratio = settings.ALERT_QUEUE_CLEAR_RATIO if clear_ratio is None else clear_ratio
    fingerprint = f"queue_wait:{queue_name}"
    alert = condition_alert_update(
        fingerprint=fingerprint,
        severity=QUEUE_WAIT_SEVERITY,
        decide=lambda state: _queue_wait_decide(
            state=state,
            fingerprint=fingerprint,
            queue_name=queue_name,
            oldest_wait_seconds=oldest_wait_seconds,
            threshold_seconds=threshold_seconds,
            clear_below_seconds=threshold_seconds * ratio,
        ),
    )
    if alert is not None:
        logger.info("queue %s wait alert %s: %s", queue_name, alert.id, alert.action)
    return alert


def _queue_wait_decide(
    *,
    state: AlertFingerprint,
    fingerprint: str,
    queue_name: str,
    oldest_wait_seconds: float | None,
    threshold_seconds: float,
    clear_below_seconds: float,
) -> Alert | None:
    over = oldest_wait_seconds is not None and oldest_wait_seconds > threshold_seconds
    clear = oldest_wait_seconds is None or oldest_wait_seconds < clear_below_seconds
    details = {
        "queue": queue_name,
        "oldest_wait_seconds": round(oldest_wait_seconds or 0.0, 1),
        "threshold_seconds": threshold_seconds,
        "clear_below_seconds": clear_below_seconds,
    }
    if over and not state.active:
        assert oldest_wait_seconds is not None
        alert = alert_create(
            fingerprint=fingerprint,
            severity=QUEUE_WAIT_SEVERITY,
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
    elif clear and state.active:
        now_waiting = (
            "nothing waits"
            if oldest_wait_seconds is None
            else f"the oldest job has waited {oldest_wait_seconds:.1f}s"
        )
        alert = alert_create(
            fingerprint=fingerprint,
            severity=QUEUE_WAIT_SEVERITY,
            action=Alert.Action.RESOLVE,
            source="queue_health",
            title=f"Cleared: queue {queue_name} is back under {clear_below_seconds:g}s",
            body=(
                f"On the {queue_name} queue {now_waiting}: under {clear_below_seconds:g}s, "
                f"the level at which the {threshold_seconds:g}s wait alert clears."
            ),
            details=details,
            destinations=trigger_destinations(trigger=state.last_alert, severity=Severity.WARNING),
        )
    else:
        alert = None
    return alert
