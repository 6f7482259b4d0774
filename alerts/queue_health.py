"""Queue health: how long the oldest job of each queue has waited, checked against thresholds.

Like Laravel Horizon's long-wait notification, per queue: the wait is read from the RQ queue
itself (its first job's ``enqueued_at``), because that is what a worker would pick up next.
"""

import logging
from dataclasses import dataclass

import django_rq
from django.conf import settings
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.utils import now as rq_now

from alerts.models import Alert
from alerts.notifications import queue_wait_alert_update

__all__ = ["QueueWait", "oldest_wait_seconds", "queue_health_check"]

logger = logging.getLogger(__name__)

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
