"""Loop health: every long-running loop notes its passes, and every loop watches the others.

Each loop command (``loops/command.py``) writes its ``LoopHeartbeat`` row when it starts and
after every pass, notes its last error when a pass fails, and clears ``last_pass_at`` when it
is stopped on purpose (SIGTERM/SIGINT). Each pass of each loop then runs
``loop_health_check``: a loop that has not passed for three of its intervals (hung, crashing
in a row, or killed) raises an ERROR alert, once, and a resolve when it passes again. A loop
stopped on purpose is not watched until it starts again. Like the queue-wait alert, a condition:
the state lives in the fingerprint's row, locked while deciding, so that two loops checking at
the same moment send one alert.
"""

import logging
import re
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from alerts.destinations import destinations_for
from alerts.models import Alert, AlertFingerprint, LoopHeartbeat, Severity
from alerts.notifications import alert_create, condition_alert_update, trigger_destinations

__all__ = [
    "STALLED_AFTER_INTERVALS",
    "LoopHealth",
    "error_summary",
    "loop_error_record",
    "loop_health_check",
    "loop_pass_record",
    "loop_stalled_alert_update",
    "loop_stalled_fingerprint",
    "loop_start_record",
    "loop_stop_record",
]

logger = logging.getLogger(__name__)

STALLED_AFTER_INTERVALS = 3
"""One slow pass, or one failed pass and its back-off, is no stall; three intervals without a
finished pass are: the loop is hung, failing every time, or gone."""

_FINGERPRINT_PREFIX = "loop_stalled:"
# user:password@ in a URL, and password=... in a DSN: an error message may carry either.
_URL_CREDENTIALS = re.compile(r"://[^/@\s]*@")
_KEY_VALUE_SECRET = re.compile(r"(?i)\b(password|passwd|pwd|token|secret)(\s*[=:]\s*)[^\s,;)'\"]+")
_ERROR_MAX_CHARS = 500


def error_summary(error: BaseException) -> str:
    """``ClassName: message``, short and with credentials blanked, fit for a row or a log line."""
    message = _URL_CREDENTIALS.sub("://***@", str(error))
    message = _KEY_VALUE_SECRET.sub(r"\1\2***", message)
    summary = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return summary[:_ERROR_MAX_CHARS]


def loop_stalled_fingerprint(name: str) -> str:
    return f"{_FINGERPRINT_PREFIX}{name}"


def loop_start_record(*, name: str, interval_seconds: float, host: str) -> None:
    """A loop starts: its start counts as a pass, so that a loop that never manages one
    alerts three intervals after it started."""
    loop_pass_record(name=name, interval_seconds=interval_seconds, host=host)


def loop_pass_record(*, name: str, interval_seconds: float, host: str) -> None:
    LoopHeartbeat.objects.update_or_create(
        name=name,
        defaults={
            "interval_seconds": interval_seconds,
            "last_pass_at": timezone.now(),
            "host": host,
        },
    )


def loop_error_record(
    *, name: str, interval_seconds: float, host: str, error: BaseException
) -> None:
    """Note a failed pass; ``last_pass_at`` stays, so the stall clock keeps running."""
    now = timezone.now()
    LoopHeartbeat.objects.update_or_create(
        name=name,
        defaults={
            "interval_seconds": interval_seconds,
            "last_error": error_summary(error),
            "last_error_at": now,
            "host": host,
        },
        # No row yet: the database was down when the loop started, which counts as its start.
        create_defaults={
            "interval_seconds": interval_seconds,
            "last_pass_at": now,
            "last_error": error_summary(error),
            "last_error_at": now,
            "host": host,
        },
    )


def loop_stop_record(*, name: str, host: str) -> None:
    """A loop stopped on purpose: not a stall. Only if the row is still this process's own, so
    that an old process stopping never blanks the heartbeat of the one that replaced it."""
    LoopHeartbeat.objects.filter(name=name, host=host).update(last_pass_at=None)


@dataclass(frozen=True)
class LoopHealth:
    name: str
    interval_seconds: float
    seconds_since_pass: float | None
    alert: Alert | None

    @property
    def stalled_after_seconds(self) -> float:
        return STALLED_AFTER_INTERVALS * self.interval_seconds

    @property
    def stalled(self) -> bool:
        return _stalled(self.seconds_since_pass, self.interval_seconds)

    def __str__(self) -> str:
        since = (
            "stopped"
            if self.seconds_since_pass is None
            else f"last pass {self.seconds_since_pass:.0f}s ago"
        )
        sent = f", sent {self.alert.action} alert {self.alert.id}" if self.alert else ""
        return f"{self.name}: {since} (stalled after {self.stalled_after_seconds:g}s){sent}"


def _stalled(seconds_since_pass: float | None, interval_seconds: float) -> bool:
    return (
        seconds_since_pass is not None
        and seconds_since_pass > STALLED_AFTER_INTERVALS * interval_seconds
    )


def _seconds_since(when: datetime | None, now: datetime) -> float | None:
    return None if when is None else max(0.0, (now - when).total_seconds())


def loop_health_check(*, now: datetime | None = None) -> list[LoopHealth]:
    """Check every loop's heartbeat; raise or resolve its stall alert as needed.

    Cheap when all is well: two queries, and a row lock only for a loop that is stalled or
    whose alert is open.
    """
    now = now or timezone.now()
    open_alerts = set(
        AlertFingerprint.objects.filter(
            fingerprint__startswith=_FINGERPRINT_PREFIX, active=True
        ).values_list("fingerprint", flat=True)
    )
    reports = []
    for beat in LoopHeartbeat.objects.all():
        since = _seconds_since(beat.last_pass_at, now)
        fingerprint = loop_stalled_fingerprint(beat.name)
        alert = None
        if _stalled(since, beat.interval_seconds) or fingerprint in open_alerts:
            alert = loop_stalled_alert_update(name=beat.name, now=now)
        open_alerts.discard(fingerprint)
        reports.append(LoopHealth(beat.name, beat.interval_seconds, since, alert))
    # An open alert whose heartbeat row was deleted (a loop retired): nothing will pass again.
    for fingerprint in sorted(open_alerts):
        name = fingerprint.removeprefix(_FINGERPRINT_PREFIX)
        alert = loop_stalled_alert_update(name=name, now=now)
        reports.append(LoopHealth(name, 0.0, None, alert))
    return reports


def loop_stalled_alert_update(*, name: str, now: datetime | None = None) -> Alert | None:
    """Decide, under the fingerprint's lock and on a fresh read of the heartbeat, whether the
    loop's stall alert starts or ends. Returns the alert sent (trigger or resolve), or None."""
    fingerprint = loop_stalled_fingerprint(name)

    def decide(state: AlertFingerprint) -> Alert | None:
        beat = LoopHeartbeat.objects.filter(name=name).first()
        at = now or timezone.now()
        since = _seconds_since(beat.last_pass_at, at) if beat is not None else None
        stalled = beat is not None and _stalled(since, beat.interval_seconds)
        if stalled and not state.active:
            assert beat is not None and since is not None
            return _trigger(fingerprint=fingerprint, beat=beat, since=since)
        if not stalled and state.active:
            return _resolve(fingerprint=fingerprint, name=name, beat=beat, trigger=state.last_alert)
        return None

    alert = condition_alert_update(
        fingerprint=fingerprint, severity=Severity.ERROR, decide=decide, now=now
    )
    if alert is not None:
        logger.info("loop %s stall alert %s: %s", name, alert.id, alert.action)
    return alert


def _trigger(*, fingerprint: str, beat: LoopHeartbeat, since: float) -> Alert:
    limit = STALLED_AFTER_INTERVALS * beat.interval_seconds
    assert beat.last_pass_at is not None
    last_pass = timezone.localtime(beat.last_pass_at).strftime("%Y-%m-%d %H:%M:%S %Z")
    lines = [
        f"The {beat.name} loop runs every {beat.interval_seconds:g}s; its last pass finished "
        f"{since:.0f}s ago ({last_pass}) on {beat.host or 'an unknown host'}. It counts as "
        f"stalled after {limit:g}s: it is hung, fails every pass, or its process is gone.",
    ]
    if beat.last_error and beat.last_error_at and beat.last_error_at >= beat.last_pass_at:
        when = timezone.localtime(beat.last_error_at).strftime("%H:%M:%S")
        lines += ["", f"Its last error ({when}): {beat.last_error}"]
    return alert_create(
        fingerprint=fingerprint,
        severity=Severity.ERROR,
        action=Alert.Action.TRIGGER,
        source="loop_health",
        title=f"Loop {beat.name} has not passed for {since:.0f}s",
        body="\n".join(lines),
        details={
            "loop": beat.name,
            "interval_seconds": beat.interval_seconds,
            "stalled_after_seconds": limit,
            "seconds_since_pass": round(since, 1),
            "last_pass_at": beat.last_pass_at.isoformat(),
            "host": beat.host,
            "last_error": beat.last_error,
            "last_error_at": beat.last_error_at.isoformat() if beat.last_error_at else None,
        },
        destinations=destinations_for(severity=Severity.ERROR),
    )


def _resolve(
    *, fingerprint: str, name: str, beat: LoopHeartbeat | None, trigger: Alert | None
) -> Alert:
    if beat is None:
        title, body = f"Cleared: loop {name} is no longer watched", "Its heartbeat row is gone."
    elif beat.last_pass_at is None:
        title = f"Cleared: loop {name} was stopped"
        body = f"The {name} loop was stopped on purpose; it is watched again once it starts."
    else:
        title = f"Cleared: loop {name} passes again"
        body = f"The {name} loop finished a pass on {beat.host or 'an unknown host'}."
    return alert_create(
        fingerprint=fingerprint,
        severity=Severity.ERROR,
        action=Alert.Action.RESOLVE,
        source="loop_health",
        title=title,
        body=body,
        details={"loop": name},
        destinations=trigger_destinations(trigger=trigger, severity=Severity.ERROR),
    )
