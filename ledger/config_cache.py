"""The price table, the providers, the budgets and the feature policies (paused, and what a job
of the feature gets by default), kept in each process and read again only when one of them
changes: every submit and every attempt asked the database for them (a submit three times, an
attempt four times), though they change a few times a month.

How a process knows its copy is current: a token in Redis (``config_token_key()``), which every
save or delete of a ``ModelPrice`` or a ``Budget`` replaces once its transaction commits. Each
use reads the token (one Redis ``GET``, far cheaper than two ORM queries) and reloads the copy
when the token is not the one the copy was loaded under. So a change is seen by every process
on every host at its next use after the commit, as a query would see it:

- a process that loads while a change commits stores what it read under the old token, and
  the new token, set after the commit, makes it load again;
- a missing token (Redis flushed or restarted) is replaced by a fresh one, so every process
  loads again; a token also lives at most ``TOKEN_TTL_SECONDS``, so that a change whose new
  token could not be set (Redis down at that moment, back up with its data) is seen at the
  latest that much later;
- Redis unreachable: every use reads the database, as before this cache;
- a thread whose own open transaction changed a price or a budget reads the database until
  that transaction ends (it must see its own uncommitted rows, and no one else may keep them).

Within ``config_pinned()`` (one step of a job or an agent run) a thread checks the token once,
at its first use, and keeps that copy to the block's end or its next ``config_recheck()``
(after a provider call): one ``GET`` for the step instead of one for each of its four to eight
uses, and a change is seen at the next step, as a change made during a step always was.

Changes that bypass the model's signals (``QuerySet.update()``, raw SQL) are not seen until the
next saved change or ``config_changed()``. Nothing in this codebase makes them.
"""

import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.db.models.signals import post_delete, post_save
from redis.exceptions import RedisError

from features.models import FeaturePolicy
from keys.models import ApiKey
from keys.selectors import api_key_ancestor_ids
from ledger.models import Budget, ModelPrice
from llmops.queues import LLM_QUEUE, config_token_key
from providers.models import Provider
from runtime.redis_clients import queue_connection

__all__ = ["Snapshot", "config_changed", "config_pinned", "config_recheck", "config_snapshot"]

logger = logging.getLogger(__name__)

# Set on a thread's database connection (Django keeps one per thread) while its open
# transaction has changed prices or budgets.
_DIRTY = "llmops_ledger_config_dirty"

TOKEN_TTL_SECONDS = 300


@dataclass(frozen=True)
class Snapshot:
    """What the database held under ``token``. Shared by every thread: never change it."""

    token: str
    prices: dict[str, list[ModelPrice]] = field(default_factory=dict)
    """Every price row of each model, the latest ``effective_from`` first."""
    providers: dict[str, Provider] = field(default_factory=dict)
    """Every provider row, by name."""
    budgets_by_feature: dict[str, list[Budget]] = field(default_factory=dict)
    budgets_by_user: dict[int, list[Budget]] = field(default_factory=dict)
    budgets_by_key: dict[int, list[Budget]] = field(default_factory=dict)
    """Every budget, enabled or not (with its user or key), by scope, each list in id order: a
    disabled budget still counts spend (ledger/budgets.py ``budget_settle``)."""
    key_parents: dict[int, int] = field(default_factory=dict)
    """The key that minted each key minted by a key: its budget holds the minted key too."""
    paused_features: frozenset[str] = frozenset()
    """The features whose policy is paused (their jobs wait: jobs/pauses.py)."""
    feature_defaults: dict[str, tuple[str, int | None, str]] = field(default_factory=dict)
    """Each feature policy's mode, deadline in seconds and default priority, by feature
    (features/selectors.py ``feature_defaults``: read at every submit)."""

    def price_at(self, model: str, at: datetime) -> ModelPrice | None:
        for price in self.prices.get(model, ()):
            if price.effective_from <= at:
                return price
        return None

    def budgets_for(
        self,
        feature: str,
        user_id: int | None,
        api_key_id: int | None = None,
        *,
        include_disabled: bool = False,
    ) -> list[Budget]:
        found = list(self.budgets_by_feature.get(feature, ()))
        if user_id is not None:
            found += self.budgets_by_user.get(user_id, ())
        if api_key_id is not None:
            for key_id in (api_key_id, *api_key_ancestor_ids(api_key_id, self.key_parents)):
                found += self.budgets_by_key.get(key_id, ())
        if not include_disabled:
            found = [budget for budget in found if budget.enabled]
        return sorted(found, key=lambda budget: budget.id)


_current: Snapshot | None = None
_load_lock = threading.Lock()
_pin = threading.local()
"""This thread's ``config_pinned()`` block: ``active``, and the copy it checked (``snapshot``)."""


@contextmanager
def config_pinned() -> Iterator[None]:
    """Check the token once in this block, at the first use: later uses by this thread get the
    same copy, until the block ends or ``config_recheck()``. Nested blocks are one block."""
    outer = getattr(_pin, "active", False)
    _pin.active = True
    try:
        yield
    finally:
        if not outer:
            _pin.active, _pin.snapshot = False, None


def config_recheck() -> None:
    """In a ``config_pinned()`` block, check the token again at the next use (after a wait)."""
    _pin.snapshot = None


def config_snapshot() -> Snapshot | None:
    """The current copy, loaded again if it is stale; None when this caller must read the
    database itself (Redis unreachable, or its own transaction changed prices or budgets)."""
    global _current
    if getattr(connection, _DIRTY, False):
        if connection.in_atomic_block:
            return None
        # Its transaction is over: committed (the token is new) or rolled back.
        setattr(connection, _DIRTY, False)
        _current = _pin.snapshot = None
    pinned = getattr(_pin, "active", False)
    if pinned and getattr(_pin, "snapshot", None) is not None:
        return _pin.snapshot  # type: ignore[no-any-return]
    try:
        token = _token()
    except RedisError:
        logger.debug("ledger config cache: Redis unreachable, reading the database")
        return None
    snapshot = _current
    if snapshot is None or snapshot.token != token:
        with _load_lock:  # one load per change, not one per thread
            snapshot = _current
            if snapshot is None or snapshot.token != token:
                snapshot = _current = _load(token)
    if pinned:
        _pin.snapshot = snapshot
    return snapshot


def config_changed() -> None:
    """Make every process load prices and budgets again once the current transaction commits."""
    global _current
    _current = _pin.snapshot = None
    if connection.in_atomic_block:
        setattr(connection, _DIRTY, True)
    transaction.on_commit(_new_token)


def _token() -> str:
    redis = queue_connection(LLM_QUEUE)
    token = redis.get(config_token_key())
    if token is None:
        redis.set(config_token_key(), uuid.uuid4().hex, nx=True, ex=TOKEN_TTL_SECONDS)
        token = redis.get(config_token_key())
    return token.decode() if isinstance(token, bytes) else str(token)


def _new_token() -> None:
    global _current
    _current = _pin.snapshot = None
    setattr(connection, _DIRTY, False)
    try:
        queue_connection(LLM_QUEUE).set(config_token_key(), uuid.uuid4().hex, ex=TOKEN_TTL_SECONDS)
    except RedisError:
        # Every process reads the database while Redis is down; a Redis back up empty gets a
        # fresh token, one back up with its data keeps the old one until it expires.
        logger.warning("ledger config cache: could not announce a price or budget change")


def _load(token: str) -> Snapshot:
    prices: dict[str, list[ModelPrice]] = {}
    for price in ModelPrice.objects.order_by("model", "-effective_from"):
        prices.setdefault(price.model, []).append(price)
    providers = {provider.name: provider for provider in Provider.objects.all()}
    by_feature: dict[str, list[Budget]] = {}
    by_user: dict[int, list[Budget]] = {}
    by_key: dict[int, list[Budget]] = {}
    for budget in Budget.objects.select_related("user", "api_key").order_by("id"):
        if budget.scope == Budget.Scope.FEATURE:
            by_feature.setdefault(budget.feature, []).append(budget)
        elif budget.scope == Budget.Scope.KEY and budget.api_key_id is not None:
            by_key.setdefault(budget.api_key_id, []).append(budget)
        elif budget.user_id is not None:
            by_user.setdefault(budget.user_id, []).append(budget)
    policies = list(
        FeaturePolicy.objects.values_list(
            "feature", "mode", "deadline_seconds", "default_priority", "paused"
        )
    )
    return Snapshot(
        token=token,
        prices=prices,
        providers=providers,
        budgets_by_feature=by_feature,
        budgets_by_user=by_user,
        budgets_by_key=by_key,
        # Only key budgets walk the chain of minted keys: without one, no query for it.
        key_parents=dict(ApiKey.objects.filter(parent__isnull=False).values_list("id", "parent_id"))
        if by_key
        else {},
        paused_features=frozenset(row[0] for row in policies if row[4]),
        feature_defaults={row[0]: (row[1], row[2], row[3]) for row in policies},
    )


def _on_change(**kwargs: object) -> None:
    config_changed()


def _on_key_minted(*, instance: ApiKey, created: bool, **kwargs: object) -> None:
    if created and instance.parent_id is not None:
        config_changed()


for _model in (ModelPrice, Budget, Provider, FeaturePolicy):
    post_save.connect(_on_change, sender=_model, dispatch_uid=f"config_cache_{_model.__name__}")
    post_delete.connect(_on_change, sender=_model, dispatch_uid=f"config_cache_d{_model.__name__}")
post_save.connect(_on_key_minted, sender=ApiKey, dispatch_uid="config_cache_key_minted")
