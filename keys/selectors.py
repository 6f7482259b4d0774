"""Reads of API keys: a user's keys, one of them, and the budget each has."""

from django.contrib.auth.models import User
from django.db.models import Prefetch, QuerySet

from api.errors import NotFound
from keys.models import ApiKey
from ledger.models import Budget

__all__ = ["api_key_budget", "api_key_get_for_user", "api_key_list_for_user"]


def _with_budget(keys: QuerySet[ApiKey]) -> QuerySet[ApiKey]:
    return keys.prefetch_related(
        Prefetch("budgets", queryset=Budget.objects.order_by("id"), to_attr="budget_rows")
    )


def api_key_list_for_user(*, user: User) -> QuerySet[ApiKey]:
    return _with_budget(ApiKey.objects.filter(user=user).order_by("-created_at", "-id"))


def api_key_get_for_user(*, user: User, key_id: int) -> ApiKey:
    key = _with_budget(ApiKey.objects.filter(user=user, id=key_id)).first()
    if key is None:
        raise NotFound("No such API key.", code="key_not_found")
    return key


def api_key_budget(key: ApiKey) -> Budget | None:
    """The key's own budget (its ``max_budget_usd``), if it has one."""
    rows = getattr(key, "budget_rows", None)
    if rows is None:
        rows = list(Budget.objects.filter(api_key=key).order_by("id"))
    return rows[0] if rows else None
