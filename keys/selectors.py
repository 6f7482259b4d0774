"""Reads of API keys: a user's keys, one of them, and the budget each has."""

import functools

from django.contrib.auth.models import User
from django.db.models import Prefetch, QuerySet
from django.db.models.signals import post_save

from api.errors import NotFound
from keys.models import ApiKey
from ledger.models import Budget

__all__ = [
    "MAX_KEY_DEPTH",
    "api_key_ancestor_ids",
    "api_key_budget",
    "api_key_get_for_user",
    "api_key_lineage_ids",
    "api_key_list_for_user",
]

MAX_KEY_DEPTH = 16
"""Keys minted by keys minted by keys...: a bound on the chains a budget or a rate walks."""


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


def api_key_ancestor_ids(key_id: int, parents: dict[int, int] | None = None) -> list[int]:
    """The keys that minted ``key_id``, nearest first: their budgets and rates hold it too.
    ``parents`` (key id -> parent id, of keys that have one) saves the queries; without it, the
    chain is read once per process (a key's parent is set when it is minted and never
    changes)."""
    if parents is None:
        return list(_ancestors_read(key_id))
    chain: list[int] = []
    current: int | None = key_id
    while current is not None and len(chain) < MAX_KEY_DEPTH:
        current = parents.get(current)
        if current is None or current in chain or current == key_id:
            break
        chain.append(current)
    return chain


@functools.lru_cache(maxsize=10_000)
def _ancestors_read(key_id: int) -> tuple[int, ...]:
    chain: list[int] = []
    current: int | None = key_id
    while current is not None and len(chain) < MAX_KEY_DEPTH:
        current = ApiKey.objects.filter(id=current).values_list("parent_id", flat=True).first()
        if current is None or current in chain or current == key_id:
            break
        chain.append(current)
    return tuple(chain)


def _forget_chains(*, created: bool, **kwargs: object) -> None:
    # A new key may take an id a flushed table freed (tests): forget what was read for it.
    if created:
        _ancestors_read.cache_clear()


post_save.connect(_forget_chains, sender=ApiKey, dispatch_uid="keys_forget_chains")


def api_key_lineage_ids(key_id: int) -> list[int]:
    """``key_id`` and every key minted under it, at any depth: the keys whose spend its
    budget holds."""
    found, frontier = [key_id], [key_id]
    for _ in range(MAX_KEY_DEPTH):
        frontier = list(
            ApiKey.objects.filter(parent_id__in=frontier)
            .exclude(id__in=found)
            .values_list("id", flat=True)
        )
        if not frontier:
            break
        found += frontier
    return found
