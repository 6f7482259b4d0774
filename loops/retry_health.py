"""Retry health: a WARNING while a retrying job's next attempt is long overdue.

Read from the database, the source of truth: a job ``retrying`` whose ``next_attempt_at`` passed
more than LLM_OVERDUE_RETRY_ALERT_SECONDS ago should be running by now. Either no RQ scheduler
runs (it moves scheduled retries onto the queue; ``rqworker --with-scheduler``), or the llm
workers are far behind. A condition, like the queue-wait alert: one trigger when the first job
is overdue, one resolve once none is, decided under the fingerprint's row lock.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from alerts.destinations import destinations_for
from alerts.models import Alert, AlertFingerprint, Severity
from alerts.notifications import alert_create, condition_alert_update, trigger_destinations
from jobs.breaker import breakers_held
from jobs.models import LlmJob
from jobs.selectors import job_oldest_overdue_retry
from llmops.queues import LLM_QUEUE
from providers.selectors import provider_models

__all__ = ["RETRY_OVERDUE_FINGERPRINT", "RetryOverdue", "retry_overdue_check"]

logger = logging.getLogger(__name__)

RETRY_OVERDUE_FINGERPRINT = f"retry_overdue:{LLM_QUEUE}"


@dataclass(frozen=True)
class RetryOverdue:
    job_id: str | None
    overdue_seconds: float | None
    threshold_seconds: float
    alert: Alert | None

    def __str__(self) -> str:
        oldest = (
            "no retry overdue"
            if self.job_id is None
            else f"retry of job {self.job_id} overdue by {self.overdue_seconds:.0f}s"
        )
        sent = f", sent {self.alert.action} alert {self.alert.id}" if self.alert else ""
        return f"retries: {oldest} (threshold {self.threshold_seconds:g}s){sent}"


def _oldest_overdue(*, due_before: datetime) -> LlmJob | None:
    # Retries held by an open provider circuit breaker wait on purpose; the failure that opened
    # it has already paged. Other providers' retries are still watched.
    held = breakers_held()
    exclude = provider_models(names=set(held)) if held else None
    return job_oldest_overdue_retry(due_before=due_before, exclude_models=exclude)


def retry_overdue_check(
    *, now: datetime | None = None, threshold_seconds: float | None = None
) -> RetryOverdue:
    """Raise the overdue-retry WARNING, or resolve it, as the oldest overdue retry says."""
    threshold = (
        settings.LLM_OVERDUE_RETRY_ALERT_SECONDS if threshold_seconds is None else threshold_seconds
    )
    now = now or timezone.now()
    due_before = now - timedelta(seconds=threshold)
    job = _oldest_overdue(due_before=due_before)
    open_alert = AlertFingerprint.objects.filter(
        fingerprint=RETRY_OVERDUE_FINGERPRINT, active=True
    ).exists()
    alert = None
    if job is not None or open_alert:

        def decide(state: AlertFingerprint) -> Alert | None:
            nonlocal job
            # Read again under the lock: another monitor may have decided meanwhile.
            job = _oldest_overdue(due_before=due_before)
            return _decide(
                state_active=state.active,
                job=job,
                now=now,
                threshold=threshold,
                trigger=state.last_alert,
            )

        alert = condition_alert_update(
            fingerprint=RETRY_OVERDUE_FINGERPRINT,
            severity=Severity.WARNING,
            decide=decide,
            now=now,
        )
        if alert is not None:
            logger.info("overdue retry alert %s: %s", alert.id, alert.action)
    return RetryOverdue(
        job_id=None if job is None else str(job.id),
        overdue_seconds=None if job is None else _overdue(job, now),
        threshold_seconds=threshold,
        alert=alert,
    )


def _overdue(job: LlmJob, now: datetime) -> float:
    assert job.next_attempt_at is not None
    return max(0.0, (now - job.next_attempt_at).total_seconds())


def _decide(
    *,
    state_active: bool,
    job: LlmJob | None,
    now: datetime,
    threshold: float,
    trigger: Alert | None,
) -> Alert | None:
    if job is not None and not state_active:
        overdue = _overdue(job, now)
        return alert_create(
            fingerprint=RETRY_OVERDUE_FINGERPRINT,
            severity=Severity.WARNING,
            action=Alert.Action.TRIGGER,
            source="retry_health",
            title=f"Retry of job {job.id} overdue by {overdue:.0f}s",
            body=(
                f"Job {job.id} ({job.feature} on {job.model}) is retrying; its next attempt "
                f"was due {overdue:.0f}s ago, over the {threshold:g}s threshold. No RQ "
                f"scheduler is running (rqworker {LLM_QUEUE} --with-scheduler), or the "
                f"{LLM_QUEUE} workers are far behind."
            ),
            details={
                "job_id": str(job.id),
                "feature": job.feature,
                "model": job.model,
                "next_attempt_at": job.next_attempt_at.isoformat() if job.next_attempt_at else None,
                "overdue_seconds": round(overdue, 1),
                "threshold_seconds": threshold,
            },
            destinations=destinations_for(severity=Severity.WARNING),
        )
    if job is None and state_active:
        return alert_create(
            fingerprint=RETRY_OVERDUE_FINGERPRINT,
            severity=Severity.WARNING,
            action=Alert.Action.RESOLVE,
            source="retry_health",
            title="Cleared: no retry is overdue",
            body=f"No retrying job's next attempt is more than {threshold:g}s overdue.",
            details={"threshold_seconds": threshold},
            destinations=trigger_destinations(trigger=trigger, severity=Severity.WARNING),
        )
    return None
