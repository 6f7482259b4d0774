"""Job deadlines: what a submit may ask for, and the rules the services and the runner apply.

A job may carry ``deadline`` (an ISO 8601 time) or ``deadline_seconds`` (that long after the
submit), never both. Then (docs/api.md#deadlines):

- not started by its deadline, it ends ``failed`` with ``deadline_exceeded`` (WARNING) and no
  provider call: the runner's first check (``job_deadline_exceeded`` in jobs/services/);
- a retry that would start after the deadline is not scheduled: the job ends ``failed`` with
  its last error, ``deadline_stopped`` set;
- a hold (rate limit, concurrency key, budget ``wait``) is cut to end just after the deadline,
  so that the runner's next look ends the job instead of a hold keeping it past it;
- a job whose deadline is at most ``LLM_DEADLINE_FRONT_SECONDS`` away when it becomes due goes
  to the front of the llm queue, like a priority feature's (``deadline_is_near``).
"""

import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from api.errors import ValidationFailed

if TYPE_CHECKING:
    from jobs.models import LlmJob

__all__ = [
    "DEADLINE_FIELDS",
    "LOOK_AFTER_SECONDS",
    "MAX_DEADLINE_SECONDS",
    "deadline_exceeded_message",
    "deadline_hold_seconds",
    "deadline_is_near",
    "deadline_passed",
    "deadline_stop",
    "deadline_stop_note",
    "retry_passes_deadline",
    "validate_deadline",
]

DEADLINE_FIELDS = ("deadline", "deadline_seconds")
MAX_DEADLINE_SECONDS = 31 * 24 * 3600
"""A month: longer than any retry schedule or budget window a job waits through."""
LOOK_AFTER_SECONDS = 0.5
"""A hold cut at the deadline ends this long after it: the runner's look then finds the deadline
passed (a look a moment before it would only hold the job again for a few milliseconds)."""


def _invalid(message: str, field: str) -> ValidationFailed:
    return ValidationFailed(message, code="invalid_deadline", detail={"field": field})


def validate_deadline(
    data: dict[str, Any], *, now: datetime | None = None
) -> tuple[datetime | None, str | None]:
    """(the deadline, the form it was given in) of a submit body's ``deadline`` or
    ``deadline_seconds``, or (None, None). The form (``"seconds:<n>"`` or the ISO time) is what
    a request's fingerprint keeps: a repeated submit with the same ``deadline_seconds`` is the
    same request, although its deadline is later. ``400 invalid_deadline`` for both, a value
    that is not a time or a positive number, a past time, or one more than a month ahead."""
    given = {name: data.get(name) for name in DEADLINE_FIELDS if data.get(name) is not None}
    if not given:
        return None, None
    if len(given) == 2:
        raise _invalid("Give deadline or deadline_seconds, not both.", "deadline")
    now = now or timezone.now()
    if "deadline_seconds" in given:
        seconds = given["deadline_seconds"]
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or not 0 < seconds <= MAX_DEADLINE_SECONDS
        ):
            raise _invalid(
                f"deadline_seconds must be a number of seconds over 0, at most "
                f"{MAX_DEADLINE_SECONDS} (a month).",
                "deadline_seconds",
            )
        return now + timedelta(seconds=seconds), f"seconds:{seconds:g}"
    value = given["deadline"]
    moment = None
    if isinstance(value, str):
        try:
            moment = parse_datetime(value.strip())
        except ValueError:
            moment = None
    if moment is None:
        raise _invalid(
            "deadline must be an ISO 8601 time, e.g. 2026-12-06T12:00:00Z (UTC unless it says "
            "otherwise).",
            "deadline",
        )
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    if moment <= now:
        raise _invalid("deadline is in the past.", "deadline")
    if moment - now > timedelta(seconds=MAX_DEADLINE_SECONDS):
        raise _invalid("deadline is more than a month ahead.", "deadline")
    return moment, moment.isoformat().replace("+00:00", "Z")


def deadline_passed(deadline: datetime | None, *, now: datetime | None = None) -> bool:
    return deadline is not None and (now or timezone.now()) >= deadline


def retry_passes_deadline(deadline: datetime | None, *, at: datetime) -> bool:
    """Whether a next attempt at ``at`` would start after the deadline."""
    return deadline is not None and at > deadline


def deadline_hold_seconds(
    deadline: datetime | None, *, delay_seconds: float, now: datetime | None = None
) -> float:
    """A hold's delay, cut to end just after the deadline (``LOOK_AFTER_SECONDS``)."""
    if deadline is None:
        return delay_seconds
    left = (deadline - (now or timezone.now())).total_seconds()
    return min(delay_seconds, max(0.0, left) + LOOK_AFTER_SECONDS)


def deadline_is_near(
    deadline: datetime | None, *, delay_seconds: float | None = None, now: datetime | None = None
) -> bool:
    """Whether the job's deadline is at most ``LLM_DEADLINE_FRONT_SECONDS`` after it becomes due
    (now, or after ``delay_seconds``): it then goes to the front of the llm queue."""
    if deadline is None:
        return False
    due = (now or timezone.now()) + timedelta(seconds=delay_seconds or 0)
    return (deadline - due).total_seconds() <= settings.LLM_DEADLINE_FRONT_SECONDS


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def deadline_exceeded_message(deadline: datetime) -> str:
    return f"Not started by its deadline ({_utc(deadline)}); the provider was not called."


def deadline_stop_note(deadline: datetime, *, at: datetime) -> str:
    return (
        f"Not retried: its next attempt ({_utc(at)}) would start after its deadline "
        f"({_utc(deadline)})."
    )


def deadline_stop(job: "LlmJob", *, at: datetime, fields: list[str], message: str) -> str | None:
    """None when a next attempt at ``at`` starts by the job's deadline (retry as usual). Else
    the deadline stops the job: ``deadline_stopped`` is set (and added to ``fields``, the row's
    fields the caller saves), and the dead letter's message, saying why, is returned."""
    if not retry_passes_deadline(job.deadline, at=at):
        return None
    assert job.deadline is not None
    job.deadline_stopped = True
    fields.append("deadline_stopped")
    return f"{message} {deadline_stop_note(job.deadline, at=at)}"
