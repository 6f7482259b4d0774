"""The retry table: how each provider failure is classified, retried and dead-lettered.

This module is the one place for those rules (docs/architecture.md, "Retry policy"). The
provider reports what happened (``ProviderOutcome``) and reads its reason code from the answer
(providers/errors.py); ``classify`` gives the reason its class and severity; ``decide`` chooses
between a delayed retry and the dead-letter queue.
"""

import random
from dataclasses import dataclass

from django.conf import settings

from jobs.models import Severity
from providers.errors import failure_reason

__all__ = [
    "DEFAULT_SCHEDULES",
    "Classification",
    "Decision",
    "classification_of",
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


_CLASSES: dict[str, Classification] = {
    c.reason_code: c
    for c in (
        # What the provider answered, or what happened on the way (providers/errors.py).
        _transient("connection_error"),
        _transient("read_timeout"),
        _transient("connection_dropped"),
        _transient("rate_limited"),
        _fatal("spend_cap", Severity.CRITICAL),
        # OpenAI-compatible 429 with code insufficient_quota: no credit left, account-wide.
        _fatal("insufficient_quota", Severity.CRITICAL),
        _transient("overloaded"),
        _transient("server_error"),
        _transient("conflict"),
        _fatal("authentication_failed", Severity.CRITICAL),
        _fatal("payment_required", Severity.CRITICAL),
        _fatal("permission_denied", Severity.CRITICAL),
        _fatal("request_too_large", Severity.WARNING),
        # Account-wide: no job of the account can run until someone buys credits.
        _fatal("credit_balance", Severity.CRITICAL),
        _fatal("usage_limit", Severity.WARNING),
        _fatal("context_too_long", Severity.WARNING),
        _fatal("not_found", Severity.ERROR),
        _fatal("invalid_request", Severity.ERROR),
        # Ours: no provider answer to read.
        _transient("worker_lost"),
        _transient("unexpected_error"),
        _fatal("budget_exceeded", Severity.WARNING),
        # Its own cap (an agent run's max_cost_usd, carried by the turn): the limit the client set.
        _fatal("max_cost_exceeded", Severity.WARNING),
        # Not started by its deadline: the client's own limit, nothing is broken.
        _fatal("deadline_exceeded", Severity.WARNING),
    )
}
"""Each reason code's class and severity."""

# The attempt kinds that are ours, not a provider call's outcome: each is its own reason.
_OUR_KINDS = frozenset(
    {"worker_lost", "unexpected_error", "budget_exceeded", "max_cost_exceeded", "deadline_exceeded"}
)


def classify(
    *,
    kind: str,
    http_status: int | None = None,
    error_type: str = "",
    error_code: str = "",
    message: str = "",
) -> Classification:
    """Classify one failed attempt by what was observed, never by SDK exception class."""
    if kind in _OUR_KINDS:
        return _CLASSES[kind]
    reason = failure_reason(
        kind=kind,
        http_status=http_status,
        error_type=error_type,
        error_code=error_code,
        message=message,
    )
    return _CLASSES[reason]


def classification_of(reason_code: str) -> Classification:
    """The class and severity of a reason code (KeyError for a code the table lacks)."""
    return _CLASSES[reason_code]


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
