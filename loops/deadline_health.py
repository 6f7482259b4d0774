"""Deadline health: a WARNING while a feature completes too few of its jobs by their deadline.

Per feature, over the last hour: the jobs whose deadline passed in it and how many completed by
it (``deadline_attainment``, jobs/selectors.py). Under ``LLM_DEADLINE_ALERT_RATIO`` (0.95) the
feature's condition starts: one trigger, then one resolve once the hour is back at or over the
ratio (or holds no deadline any more), decided under the fingerprint's row lock like every
condition alert (``condition_alert_update``). One fingerprint per feature, so one slow feature
does not hide another.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from alerts.destinations import destinations_for
from alerts.models import Alert, AlertFingerprint, Severity
from alerts.notifications import alert_create, condition_alert_update, trigger_destinations
from jobs.selectors import DeadlineAttainment, deadline_attainment

__all__ = ["DEADLINE_FINGERPRINT_PREFIX", "DeadlineHealth", "deadline_attainment_check"]

logger = logging.getLogger(__name__)

DEADLINE_FINGERPRINT_PREFIX = "deadline_attainment:"
WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class DeadlineHealth:
    below: list[DeadlineAttainment]
    ratio: float
    alerts: list[Alert]

    def __str__(self) -> str:
        if not self.below:
            return f"deadlines: every feature at or over {self.ratio:g} in the last hour"
        worst = ", ".join(f"{a.feature} {a.met}/{a.with_deadline}" for a in self.below)
        return f"deadlines: under {self.ratio:g} in the last hour: {worst}"


def _hour(*, now: datetime, feature: str | None = None) -> dict[str, DeadlineAttainment]:
    rows = deadline_attainment(since=now - WINDOW, until=now, feature=feature, now=now)
    return {row.feature: row for row in rows}


def deadline_attainment_check(
    *, now: datetime | None = None, ratio: float | None = None
) -> DeadlineHealth:
    """Raise each feature's deadline WARNING under the ratio, resolve those back over it."""
    ratio = settings.LLM_DEADLINE_ALERT_RATIO if ratio is None else ratio
    now = now or timezone.now()
    hour = _hour(now=now)
    below = [row for row in hour.values() if row.ratio < ratio]
    active = {
        fingerprint.removeprefix(DEADLINE_FINGERPRINT_PREFIX)
        for fingerprint in AlertFingerprint.objects.filter(
            fingerprint__startswith=DEADLINE_FINGERPRINT_PREFIX, active=True
        ).values_list("fingerprint", flat=True)
    }
    alerts = []
    for feature in sorted({row.feature for row in below} | active):
        fingerprint = f"{DEADLINE_FINGERPRINT_PREFIX}{feature}"

        def decide(state: AlertFingerprint, feature: str = feature) -> Alert | None:
            # Read again under the lock: another monitor may have decided meanwhile.
            row = _hour(now=now, feature=feature).get(feature)
            return _decide(state=state, feature=feature, row=row, ratio=ratio)

        alert = condition_alert_update(
            fingerprint=fingerprint, severity=Severity.WARNING, decide=decide, now=now
        )
        if alert is not None:
            logger.info("deadline attainment alert %s: %s (%s)", alert.id, alert.action, feature)
            alerts.append(alert)
    return DeadlineHealth(below=below, ratio=ratio, alerts=alerts)


def _decide(
    *, state: AlertFingerprint, feature: str, row: DeadlineAttainment | None, ratio: float
) -> Alert | None:
    fingerprint = f"{DEADLINE_FINGERPRINT_PREFIX}{feature}"
    under = row is not None and row.ratio < ratio
    if under and not state.active:
        assert row is not None
        return alert_create(
            fingerprint=fingerprint,
            severity=Severity.WARNING,
            action=Alert.Action.TRIGGER,
            source="deadline_health",
            title=f"{feature}: {row.ratio:.0%} of jobs met their deadline in the last hour",
            body=(
                f"Of the {row.with_deadline} jobs of {feature} whose deadline passed in the last "
                f"hour, {row.met} completed by it ({row.ratio:.1%}), under the "
                f"{ratio:.0%} of LLM_DEADLINE_ALERT_RATIO. The llm workers may be behind, "
                "the provider slow or rate-limited, or the deadlines too tight."
            ),
            details={
                "feature": feature,
                "with_deadline": row.with_deadline,
                "met": row.met,
                "ratio": round(row.ratio, 4),
                "threshold": ratio,
            },
            destinations=destinations_for(severity=Severity.WARNING),
        )
    if not under and state.active:
        return alert_create(
            fingerprint=fingerprint,
            severity=Severity.WARNING,
            action=Alert.Action.RESOLVE,
            source="deadline_health",
            title=f"Cleared: {feature} meets its deadlines",
            body=f"In the last hour {feature} met at least {ratio:.0%} of its deadlines.",
            details={"feature": feature, "threshold": ratio},
            destinations=trigger_destinations(trigger=state.last_alert, severity=Severity.WARNING),
        )
    return None
