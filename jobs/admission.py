"""What a job must pass to be accepted, beyond the shape of its body (jobs/validation.py):
a priced chat model of an enabled provider whose limits fit ``max_tokens``, budgets with room
left, and idempotency keys compared byte for byte. Used by ``job_submit`` and ``job_requeue``."""

import hashlib
import math
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.utils import timezone

from api.errors import LimitExceeded, ValidationFailed
from ledger.budgets import budget_usage, budgets_for
from ledger.models import Budget, ModelPrice
from ledger.selectors import price_for_model, unknown_model_error
from providers.selectors import provider_name_for_model, provider_row

if TYPE_CHECKING:
    from jobs.validation import JobRequest

__all__ = [
    "check_against_price_table",
    "check_budgets_not_spent",
    "idempotency_key_hash",
    "policy_defaults",
]


def check_against_price_table(*, model: str, max_tokens: int, kind: str = "chat") -> ModelPrice:
    """A model must have a price and be of the job's kind (chat, or embedding), and
    ``max_tokens`` must fit the model's own output limit (kept beside its price): every call
    streams, so no call-length ceiling applies below it. Returns the price in force."""
    price = price_for_model(model=model)
    if price is None:
        raise unknown_model_error(model)
    if price.kind != kind:
        needs = (
            "an embeddings request needs an embedding model"
            if kind == "embedding"
            else ("a job needs a chat model (embeddings go to POST /api/v1/embeddings/)")
        )
        raise ValidationFailed(
            f"{model} is a {price.kind} model: {needs}.",
            code="invalid_model",
            detail={"field": "model", "kind": price.kind},
        )
    provider = provider_row(name=price.provider_name)
    if provider is not None and not provider.enabled:
        raise ValidationFailed(
            f"{model} runs on the provider {provider.name}, which is disabled.",
            code="provider_disabled",
            detail={"field": "model", "provider": provider.name},
        )
    maximum = price.max_output_tokens
    if kind == ModelPrice.Kind.CHAT and max_tokens > maximum:
        raise ValidationFailed(
            f"max_tokens must be between 1 and {maximum} for {model}.",
            code="invalid_max_tokens",
            detail={"field": "max_tokens", "maximum": maximum},
        )
    return price


def check_budgets_not_spent(
    *,
    feature: str,
    user: User,
    api_key_id: int | None = None,
    worst_case_usd: Decimal = Decimal(0),
) -> None:
    """A job that no hard budget of its feature, user or API key can take gets 429 at submit,
    and nothing is written: a budget already spent this window (``Retry-After`` at its reset),
    a ``reject`` budget whose window cannot take the job's worst case (``worst_case_usd``, one
    attempt at its upper bound) on top of what it spent, or any budget whose whole limit is
    below that worst case (it never could: no ``Retry-After``)."""
    budgets = budgets_for(feature=feature, user_id=user.id, api_key_id=api_key_id)
    refused, never = [], False
    for budget in budgets:
        usage = budget_usage(budget=budget)
        if usage.exhausted:
            refused.append(usage)
        elif worst_case_usd > budget.limit_usd:
            refused.append(usage)
            never = True
        elif (
            budget.on_exceed == Budget.OnExceed.REJECT
            and usage.spent_usd + worst_case_usd > budget.limit_usd
        ):
            refused.append(usage)
    if not refused:
        return
    reset = max(usage.window_end for usage in refused)
    retry_after = max(1, math.ceil((reset - timezone.now()).total_seconds()))
    listed = ", ".join(
        f"{u.budget.name} ({u.budget.period}: ${u.spent_usd} of ${u.budget.limit_usd})"
        for u in refused
    )
    if worst_case_usd and any(not u.exhausted for u in refused):
        message = (
            f"This job could cost up to ${worst_case_usd} (its input and max_tokens at the "
            f"model's price), more than this budget can take: {listed}. "
            + (
                "Raise the budget or lower max_tokens."
                if never
                else f"It resets at {reset.isoformat()}."
            )
        )
    else:
        message = (
            f"This budget is spent for the current window: {listed}. "
            f"It resets at {reset.isoformat()}."
        )
    detail: dict[str, Any] = {
        "budgets": [
            {
                "budget": u.budget.name,
                "period": u.budget.period,
                "limit_usd": str(u.budget.limit_usd),
                "spent_usd": str(u.spent_usd),
                "resets_at": u.window_end.isoformat(),
            }
            for u in refused
        ],
    }
    if worst_case_usd:
        detail["worst_case_usd"] = str(worst_case_usd)
    headers = {}
    if not never:
        detail["retry_after_seconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    raise LimitExceeded(message, code="budget_exceeded", detail=detail, headers=headers)


IDEMPOTENCY_KEY_MAX_LENGTH = 255


def idempotency_key_hash(key: str) -> str:
    """The stored hash of a client's Idempotency-Key (jobs, batches, agent runs); a key longer
    than the column holds is refused with ``400 invalid_idempotency_key``."""
    if len(key) > IDEMPOTENCY_KEY_MAX_LENGTH:
        raise ValidationFailed(
            "Idempotency-Key must be at most 255 characters.", code="invalid_idempotency_key"
        )
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def policy_defaults(request: "JobRequest", *, memo: dict[Any, Any] | None = None) -> "JobRequest":
    """The request with what its feature policy gives a job that does not say (features/): its
    mode, its priority (``high`` for a feature in ``LLM_PRIORITY_FEATURES`` without one, else
    ``normal``), and a deadline ``deadline_seconds`` from now. ``memo``: one policy read per
    feature, model, asked mode and priority for many jobs at once (jobs/bulk.py)."""
    from features.selectors import feature_defaults

    key = (request.feature, request.model, request.mode, request.priority)
    if memo is not None and key in memo:
        mode, deadline_seconds, priority = memo[key]
    else:
        policy_mode, deadline_seconds, policy_priority = feature_defaults(feature=request.feature)
        mode = _runnable_mode(model=request.model, mode=request.mode or policy_mode)
        priority = request.priority or policy_priority or _setting_priority(request.feature)
        if memo is not None:
            memo[key] = (mode, deadline_seconds, priority)
    changes: dict[str, Any] = {"mode": mode, "priority": priority}
    if request.deadline is None and deadline_seconds:
        changes["deadline"] = timezone.now() + timedelta(seconds=deadline_seconds)
    return replace(request, **changes)


def _setting_priority(feature: str) -> str:
    from ratelimits.configured_limits import is_priority_feature

    return "high" if is_priority_feature(feature) else "normal"


def _runnable_mode(*, model: str, mode: str) -> str:
    """A deferred job of a provider without a Message Batches API (an OpenAI-compatible one)
    runs in real time."""
    from providers.message_batches import batches_supported

    if mode == "deferred" and not batches_supported(provider_name_for_model(model=model)):
        return "realtime"
    return mode
