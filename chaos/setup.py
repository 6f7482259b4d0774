"""What a drill sets up in the database before it starts, and takes away after its checks:
the user who owns its jobs and a budget over them (so that every attempt reserves and settles,
and the check that no budget goes negative has something to look at); a tight budget on one
feature that some of its jobs run into (so that "no window above its limit" is tested at the
limit); the API token of the drill's WebSocket; the mixed drill's feature policies and API keys
with budgets (chaos/mix.py)."""

from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Sum

from chaos.safety import DRILL_USERNAME
from features.models import FeaturePolicy
from features.services import feature_policy_update
from keys.models import ApiKey
from keys.scopes import ALL_SCOPES
from keys.services import api_key_create, api_key_grant, api_key_revoke
from keys.validation import KeyRequest
from ledger.budgets import window_bounds
from ledger.models import Budget, CostEntry

__all__ = [
    "BUDGET_LIMIT_USD",
    "PolicyBefore",
    "drill_key_create",
    "drill_policy_restore",
    "drill_policy_set",
    "CAPPED_FEATURE",
    "drill_budget_create",
    "drill_budget_remove",
    "drill_budget_set_enabled",
    "drill_capped_budget_create",
    "drill_token_create",
    "drill_token_revoke",
    "drill_user_ensure",
]

CAPPED_FEATURE = "chaos-capped"
"""One job in ten has this feature; its budget holds a sixth of their worst cases."""

BUDGET_LIMIT_USD = Decimal("10000")
"""Far above what a drill spends (about $0.002 a job): the budget is reserved and settled on
every attempt, never refused."""


def drill_user_ensure() -> User:
    user, created = get_user_model().objects.get_or_create(username=DRILL_USERNAME)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user  # type: ignore[return-value]


@transaction.atomic
def drill_budget_create(*, user: User) -> Budget:
    return Budget.objects.create(
        scope=Budget.Scope.USER,
        user=user,
        period=Budget.Period.DAY,
        limit_usd=BUDGET_LIMIT_USD,
        soft_alert_percent=100,
        on_exceed=Budget.OnExceed.REJECT,
    )


def drill_budget_remove(*, budget_id: int) -> None:
    """Its windows and reservations go with it; the ledger rows stay (they never reference a
    budget)."""
    Budget.objects.filter(id=budget_id).delete()


@transaction.atomic
def drill_capped_budget_create(*, limit_usd: Decimal) -> Budget:
    """A budget on the capped feature with room for ``limit_usd`` of this drill's jobs: its
    window counts what the feature spent earlier today (ledger/budgets.py seeds a window from
    the ledger), so an earlier drill's spend is added to the limit, or a second drill of the day
    would find the budget spent before its first job."""
    start, end = window_bounds(Budget.Period.DAY)
    earlier = CostEntry.objects.filter(
        feature=CAPPED_FEATURE, created_at__gte=start, created_at__lt=end
    ).aggregate(total=Sum("cost_usd"))["total"] or Decimal(0)
    return Budget.objects.create(
        scope=Budget.Scope.FEATURE,
        feature=CAPPED_FEATURE,
        period=Budget.Period.DAY,
        limit_usd=limit_usd + earlier,
        soft_alert_percent=100,
        on_exceed=Budget.OnExceed.REJECT,
    )


def drill_budget_set_enabled(*, budget_id: int, enabled: bool) -> None:
    """What staff do in the admin: ``save`` announces the change to every process
    (ledger/config_cache.py)."""
    budget = Budget.objects.get(id=budget_id)
    budget.enabled = enabled
    budget.save(update_fields=["enabled"])


def drill_token_create(*, user: User) -> str:
    """A fresh API key of the drill's user (every scope), the ones before it revoked."""
    drill_token_revoke(user=user)
    _key, secret = api_key_create(
        user=user, request=KeyRequest(name="chaos drill", scopes=list(ALL_SCOPES))
    )
    return secret


def drill_token_revoke(*, user: User) -> int:
    """Revokes the user's API keys, as staff revoke one in the admin; returns how many."""
    keys = list(ApiKey.objects.filter(user=user, revoked_at__isnull=True))
    for key in keys:
        api_key_revoke(key=key)
    return len(keys)


PolicyBefore = tuple[str, dict[str, Any] | None]
"""A feature and its policy's settings before the drill changed them (None: it had none)."""


def drill_policy_set(
    *, feature: str, mode: str | None = None, fallback_models: list[str] | None = None
) -> PolicyBefore:
    """What staff do with the feature policy admin; returns what to put back afterwards."""
    existing = FeaturePolicy.objects.filter(feature=feature).first()
    before = (
        None
        if existing is None
        else {
            "mode": existing.mode,
            "fallback_models": list(existing.fallback_models),
            "deadline_seconds": existing.deadline_seconds,
        }
    )
    feature_policy_update(feature=feature, mode=mode, fallback_models=fallback_models)
    return feature, before


def drill_policy_restore(*, before: PolicyBefore) -> None:
    feature, settings = before
    if settings is None:
        FeaturePolicy.objects.filter(feature=feature).delete()
    else:
        feature_policy_update(feature=feature, **settings)


def drill_key_create(
    *, user: User, name: str, max_budget_usd: Decimal, parent: ApiKey | None = None
) -> tuple[ApiKey, Budget]:
    """A key of the drill's user with a daily budget; with ``parent``, minted by that key (its
    grant checked as the API checks it: the parent's budget holds the new key's spend too)."""
    request = KeyRequest(
        name=name, scopes=list(ALL_SCOPES), max_budget_usd=max_budget_usd, budget_period="day"
    )
    if parent is not None:
        request = api_key_grant(caller=parent, request=request)
    key, _secret = api_key_create(user=user, request=request, parent=parent)
    return key, Budget.objects.get(scope=Budget.Scope.KEY, api_key=key)
