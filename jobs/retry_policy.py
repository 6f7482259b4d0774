"""The retry table: how each provider failure is classified, retried and dead-lettered.

This module is the one place for those rules (docs/architecture.md, "Retry policy"). The
provider client reports what happened (``ProviderOutcome``); ``classify`` names the failure
class; ``decide`` chooses between a delayed retry and the dead-letter queue.
"""

import random
import re
from dataclasses import dataclass

from django.conf import settings

from jobs.models import Severity

__all__ = [
    "DEFAULT_SCHEDULES",
    "Classification",
    "Decision",
    "classify",
    "decide",
    "schedules",
]

DEFAULT_SCHEDULES: dict[str, tuple[float, ...]] = {
    # Anthropic's rate limits refill continuously; short steps first, then back off hard.
    "rate_limited": (2, 5, 12, 30, 75),
    # Overload storms last minutes, not seconds.
    "overloaded": (15, 60, 180),
    "server_error": (3, 10, 30),
    "connection_error": (3, 10, 30),
    # The call may have been done and billed; a second unknown outcome is not worth a third.
    "read_timeout": (3,),
    "connection_dropped": (3, 10, 30),
    "conflict": (3, 10, 30),
    "worker_lost": (3, 10, 30),
    # Our own code or an unreadable answer: worth a retry or two, not a storm.
    "unexpected_error": (3, 10),
}
"""Delays in seconds before retry n of each transient class; the class dead-letters after."""


@dataclass(frozen=True)
class Classification:
    reason_code: str
    transient: bool
    severity: str
    """Severity of the FailureRecord if the job dead-letters with this reason."""


@dataclass(frozen=True)
class Decision:
    classification: Classification
    retry: bool
    delay_seconds: float | None = None
    retries_exhausted: bool = False


def _fatal(reason: str, severity: str) -> Classification:
    return Classification(reason, transient=False, severity=severity)


def _transient(reason: str) -> Classification:
    return Classification(reason, transient=True, severity=Severity.ERROR)


_CONTEXT_TOO_LONG = re.compile(
    r"prompt is too long|context (window|length|limit)|too many (input )?tokens", re.I
)
_USAGE_LIMIT = re.compile(r"reached your specified API usage limits", re.I)
_CREDIT_BALANCE = re.compile(r"credit balance is too low", re.I)


def classify(
    *,
    kind: str,
    http_status: int | None = None,
    error_type: str = "",
    error_code: str = "",
    message: str = "",
) -> Classification:
    """Classify one failed attempt by what was observed, never by SDK exception class."""
    if kind == "connection_error":
        return _transient("connection_error")
    if kind == "read_timeout":
        return _transient("read_timeout")
    if kind == "connection_dropped":
        return _transient("connection_dropped")
    if kind == "worker_lost":
        return _transient("worker_lost")
    if kind == "unexpected_error":
        return _transient("unexpected_error")
    if kind == "budget_exceeded":
        return _fatal("budget_exceeded", Severity.WARNING)

    status = http_status or 0
    if status == 429:
        if error_code == "enforced_spend_limit_reached":
            return _fatal("spend_cap", Severity.CRITICAL)
        return _transient("rate_limited")
    if status == 529 or error_type == "overloaded_error":
        return _transient("overloaded")
    if status >= 500 or status == 408:
        return _transient("server_error")
    if status == 409:
        return _transient("conflict")
    if status == 401:
        return _fatal("authentication_failed", Severity.CRITICAL)
    if status == 402:
        return _fatal("payment_required", Severity.CRITICAL)
    if status == 403:
        return _fatal("permission_denied", Severity.CRITICAL)
    if status == 413 or error_type == "request_too_large":
        return _fatal("request_too_large", Severity.WARNING)
    if status == 400 and _CREDIT_BALANCE.search(message):
        # Account-wide: no job of the account can run until someone buys credits.
        return _fatal("credit_balance", Severity.CRITICAL)
    if status == 400 and _USAGE_LIMIT.search(message):
        return _fatal("usage_limit", Severity.WARNING)
    if status == 400 and _CONTEXT_TOO_LONG.search(message):
        return _fatal("context_too_long", Severity.WARNING)
    if status == 404:
        return _fatal("not_found", Severity.ERROR)
    return _fatal("invalid_request", Severity.ERROR)


def schedules() -> dict[str, tuple[float, ...]]:
    merged = dict(DEFAULT_SCHEDULES)
    for reason, delays in settings.LLM_RETRY_SCHEDULES.items():
        merged[reason] = tuple(float(d) for d in delays)
    return merged


def decide(
    classification: Classification,
    *,
    retries_used: int,
    attempts_in_budget: int,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> Decision:
    """Retry with a delay, or dead-letter.

    ``retries_used`` counts earlier retries of this class since the last requeue;
    ``attempts_in_budget`` counts attempts made since then, the current one included.
    """
    if not classification.transient:
        return Decision(classification, retry=False)
    schedule = schedules().get(classification.reason_code, ())
    if retries_used >= len(schedule) or attempts_in_budget >= settings.LLM_MAX_ATTEMPTS:
        return Decision(classification, retry=False, retries_exhausted=True)
    base = schedule[retries_used]
    jitter = (rng or random).uniform(0, settings.LLM_RETRY_JITTER * base)
    delay = (base + jitter) * settings.LLM_RETRY_DELAY_SCALE
    if retry_after is not None:
        # The provider knows when capacity returns; never come back sooner, however compressed.
        delay = max(delay, retry_after)
    return Decision(classification, retry=True, delay_seconds=delay)
