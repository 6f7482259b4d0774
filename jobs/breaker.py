"""The provider circuit breaker: account-wide failures stop dispatch instead of draining the queue.

A revoked key (401), a forbidden account (403, 402), the spend cap or an empty credit balance
fail every call the same way; dead-lettering a backlog of thousands one job at a time helps no
one. The first such failure dead-letters its own job (one CRITICAL FailureRecord and its alert)
and opens the breaker; from then on workers start no call for that provider, and waiting jobs stay
``queued``/``retrying`` with no attempt used. Every ``LLM_BREAKER_PROBE_SECONDS`` one job is let
through as a probe; its success closes the breaker. Staff close it from the admin once the
account is fixed. Closing enqueues the held jobs at once.
"""

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.dispatch import Signal
from django.utils import timezone

from jobs.models import ProviderBreaker
from providers.models import DEFAULT_PROVIDER

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from jobs.models import LlmJob

__all__ = [
    "ACCOUNT_WIDE_REASONS",
    "PROVIDER",
    "breaker_close",
    "breaker_closed",
    "breaker_gate",
    "breaker_open",
    "breaker_probe_due",
    "breakers_held",
    "is_account_wide",
]

logger = logging.getLogger(__name__)

breaker_closed = Signal()
"""Sent with ``provider`` once a breaker's close has committed: the jobs it held may run."""

PROVIDER = DEFAULT_PROVIDER
"""The default provider (``anthropic``); each provider has a breaker of its own, named as its
row (providers/models.py), and an open one holds only its own provider's jobs."""

ACCOUNT_WIDE_REASONS = frozenset(
    {
        "authentication_failed",
        "permission_denied",
        "payment_required",
        "spend_cap",
        "insufficient_quota",
        "credit_balance",
    }
)
"""Reason codes (jobs/retry_policy.py) that no other job of the account can escape."""


def is_account_wide(reason_code: str) -> bool:
    """Whether this failure opens the breaker (never, with LLM_BREAKER_ENABLED off)."""
    return settings.LLM_BREAKER_ENABLED and reason_code in ACCOUNT_WIDE_REASONS


def _open_breaker(provider: str) -> ProviderBreaker | None:
    return ProviderBreaker.objects.filter(
        provider=provider, state=ProviderBreaker.State.OPEN
    ).first()


def breaker_gate(*, provider: str = PROVIDER) -> Literal["closed", "probe", "open"]:
    """May a worker call the provider now? ``probe``: the breaker is open but this caller won
    the one probe call of this period (a conditional update: exactly one winner)."""
    breaker = _open_breaker(provider) if settings.LLM_BREAKER_ENABLED else None
    if breaker is None:
        return "closed"
    now = timezone.now()
    if breaker.next_probe_at is None or breaker.next_probe_at > now:
        return "open"
    won = ProviderBreaker.objects.filter(
        id=breaker.id, state=ProviderBreaker.State.OPEN, next_probe_at=breaker.next_probe_at
    ).update(next_probe_at=now + _probe_period(), probes=F("probes") + 1)
    return "probe" if won else "open"


def breaker_probe_due(*, provider: str = PROVIDER) -> bool | None:
    """None while the breaker is closed; else whether a probe call is due."""
    breaker = _open_breaker(provider) if settings.LLM_BREAKER_ENABLED else None
    if breaker is None:
        return None
    return breaker.next_probe_at is not None and breaker.next_probe_at <= timezone.now()


def breakers_held() -> dict[str, bool]:
    """Every provider whose breaker is open, and whether its probe call is due now."""
    if not settings.LLM_BREAKER_ENABLED:
        return {}
    now = timezone.now()
    return {
        provider: next_probe_at is not None and next_probe_at <= now
        for provider, next_probe_at in ProviderBreaker.objects.filter(
            state=ProviderBreaker.State.OPEN
        ).values_list("provider", "next_probe_at")
    }


def _probe_period() -> timedelta:
    return timedelta(seconds=settings.LLM_BREAKER_PROBE_SECONDS)


def breaker_open(
    *,
    reason_code: str,
    message: str,
    job: "LlmJob | None" = None,
    provider: str = PROVIDER,
    answered_at: datetime | None = None,
) -> bool:
    """Open the breaker (inside the caller's transaction). Returns whether it opened now.

    ``answered_at``: when the provider gave the failing answer. One given before the breaker was
    last closed does not open it again: closing says the account is fixed from then on, and a
    401 that was already in the worker's hands (its recording lagged behind the close) says
    nothing about the key now; the next call does. Its job dead-letters all the same."""
    ProviderBreaker.objects.get_or_create(provider=provider)
    breaker = ProviderBreaker.objects.select_for_update().get(provider=provider)
    if breaker.is_open:
        return False
    closed_at = breaker.closed_at
    if answered_at is not None and closed_at is not None and answered_at < closed_at:
        logger.warning(
            "provider %s: %s answered before the breaker was closed; it stays closed",
            provider,
            reason_code,
        )
        return False
    now = timezone.now()
    breaker.state = ProviderBreaker.State.OPEN
    breaker.reason_code = reason_code
    breaker.message = message[:2000]
    breaker.opened_at = now
    breaker.opened_by_job = job
    breaker.next_probe_at = now + _probe_period()
    breaker.probes = 0
    breaker.closed_at, breaker.closed_by, breaker.close_reason = None, None, ""
    breaker.save()
    logger.critical(
        "provider %s circuit breaker OPEN (%s): llm dispatch stopped; close it in the admin",
        provider,
        reason_code,
    )
    return True


@transaction.atomic
def breaker_close(*, provider: str = PROVIDER, by: "User | None" = None, reason: str = "") -> bool:
    """Close the breaker and enqueue the jobs it held. Returns whether it was open."""
    breaker = ProviderBreaker.objects.select_for_update().filter(provider=provider).first()
    if breaker is None or not breaker.is_open:
        return False
    breaker.state = ProviderBreaker.State.CLOSED
    breaker.closed_at = timezone.now()
    breaker.closed_by = by
    breaker.close_reason = reason[:200]
    breaker.next_probe_at = None
    breaker.save()
    logger.warning("provider %s circuit breaker closed (%s)", provider, reason or by)

    # The jobs it held are enqueued again by the reconciler, which subscribes (jobs/apps.py):
    # the reconciler is above the job services that ask the breaker, never below them.
    transaction.on_commit(
        lambda: breaker_closed.send(sender=ProviderBreaker, provider=provider), robust=True
    )
    return True
