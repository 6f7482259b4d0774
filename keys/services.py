"""Every write on API keys: create, revoke, rotate, and what authenticating with one records.

The secret leaves these functions once, as the return value of ``api_key_create`` or
``api_key_rotate``; what is stored is its keyed hash (keys/hashing.py). Nothing here logs a
secret or puts one in an error.
"""

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from api.errors import ApplicationError, Conflict, ValidationFailed
from keys.hashing import MAX_SECRET_LENGTH, candidate_hashes, display_prefix, new_secret
from keys.hashing import secret_hash as hash_of
from keys.models import ApiKey, ApiKeySecret
from keys.permissions import InsufficientScope
from keys.selectors import api_key_budget
from keys.signals import api_key_event
from keys.validation import KeyRequest
from ledger.models import Budget

__all__ = [
    "KeyNotCovered",
    "KeyRefused",
    "Rotation",
    "api_key_authenticate",
    "api_key_check_covers",
    "api_key_create",
    "api_key_grant",
    "api_key_import",
    "api_key_revoke",
    "api_key_rotate",
]

logger = logging.getLogger(__name__)


class KeyRefused(Exception):
    """A secret that does not authenticate, and why, in words safe to show its sender (never the
    secret itself)."""


def _store_secret(key: ApiKey, secret: str) -> ApiKeySecret:
    return ApiKeySecret.objects.create(
        key=key, secret_hash=hash_of(secret), prefix=display_prefix(secret)
    )


@transaction.atomic
def api_key_create(
    *, user: User, request: KeyRequest, secret: str | None = None, parent: ApiKey | None = None
) -> tuple[ApiKey, str]:
    """A new key of ``user`` and its secret, which only this return value ever holds. A
    ``max_budget_usd`` becomes the key's budget (a ``ledger.Budget`` of scope ``key``), held by
    the same reservations as feature and user budgets. ``parent``: the key that mints it (pass
    the request through ``api_key_grant`` first); the parent's budget and rate hold the new
    key's spend and submits too."""
    if parent is not None and parent.user_id != user.pk:
        raise ValidationFailed("A key mints keys for its own user only.", code="invalid_parent")
    secret = secret or new_secret()
    key = ApiKey.objects.create(
        user=user,
        name=request.name,
        prefix=display_prefix(secret),
        scopes=list(request.scopes),
        expires_at=request.expires_at,
        rpm=request.rpm,
        parent=parent,
    )
    _store_secret(key, secret)
    if request.max_budget_usd is not None:
        Budget.objects.create(
            scope=Budget.Scope.KEY,
            api_key=key,
            period=request.budget_period,
            limit_usd=request.max_budget_usd,
        )
    logger.info("API key %s (%s...) of user %s created", key.id, key.prefix, user.pk)
    return key, secret


def api_key_import(*, user_id: int, secret: str, name: str, scopes: list[str]) -> ApiKey:
    """A key for a secret issued before keys existed (a DRF token: the data migration)."""
    key = ApiKey.objects.create(
        user_id=user_id, name=name, prefix=display_prefix(secret), scopes=scopes
    )
    _store_secret(key, secret)
    return key


@transaction.atomic
def api_key_revoke(*, key: ApiKey) -> ApiKey:
    """Revoke the key: every secret of it (a rotation's old one too) answers 401 from now on,
    and its open sockets close at their next check. Revoking again changes nothing."""
    now = timezone.now()
    if ApiKey.objects.filter(id=key.id, revoked_at__isnull=True).update(revoked_at=now):
        logger.info("API key %s (%s...) revoked", key.id, key.prefix)
        api_key_event.send(
            sender=ApiKey, key=key, action="revoked", changes={"revoked_at": (None, now)}
        )
    key.refresh_from_db(fields=["revoked_at"])
    return key


@dataclass(frozen=True)
class Rotation:
    key: ApiKey
    secret: str
    """The new secret: only this return value ever holds it."""
    previous_expires_at: datetime
    """When the secrets the key had before stop working."""


@transaction.atomic
def api_key_rotate(*, key: ApiKey, grace_seconds: int | None = None) -> Rotation:
    """A new secret for the same key (its id, scopes, expiry, budget and rate stay); the
    secrets it had keep working ``grace_seconds`` more (``API_KEY_ROTATION_GRACE_SECONDS``, a
    day, by default), or less if they were already ending sooner."""
    locked = ApiKey.objects.select_for_update().get(id=key.id)
    now = timezone.now()
    if locked.revoked_at is not None:
        raise Conflict("This key is revoked: create a new one.", code="key_revoked")
    if locked.expires_at is not None and locked.expires_at <= now:
        raise Conflict("This key has expired: create a new one.", code="key_expired")
    grace = settings.API_KEY_ROTATION_GRACE_SECONDS if grace_seconds is None else grace_seconds
    ends = now + timedelta(seconds=grace)
    ApiKeySecret.objects.filter(key=locked).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=ends)
    ).update(expires_at=ends)
    secret = new_secret()
    _store_secret(locked, secret)
    before, locked.prefix = locked.prefix, display_prefix(secret)
    locked.save(update_fields=["prefix"])
    api_key_event.send(
        sender=ApiKey,
        key=locked,
        action="rotated",
        changes={"prefix": (before, locked.prefix), "previous_secrets_end": (None, ends)},
    )
    logger.info(
        "API key %s rotated to %s...; the old secret ends %s", locked.id, locked.prefix, ends
    )
    return Rotation(key=locked, secret=secret, previous_expires_at=ends)


def api_key_authenticate(*, secret: str) -> ApiKey:
    """The key ``secret`` belongs to, if it may be used now (with its user); else raises
    ``KeyRefused``. Records the use (``last_used_at``, at most once a minute) and hashes a
    secret found under a fallback hash key again under the current one."""
    if not secret or len(secret) > MAX_SECRET_LENGTH:
        raise KeyRefused("Invalid API key.")
    hashes = candidate_hashes(secret)
    stored = (
        ApiKeySecret.objects.select_related("key", "key__user")
        .filter(secret_hash__in=hashes)
        .first()
    )
    if stored is None:
        raise KeyRefused("Invalid API key.")
    key, now = stored.key, timezone.now()
    if key.revoked_at is not None:
        raise KeyRefused("This API key has been revoked.")
    if key.expires_at is not None and key.expires_at <= now:
        raise KeyRefused("This API key has expired.")
    if stored.expires_at is not None and stored.expires_at <= now:
        raise KeyRefused("This API key was rotated and its old secret's grace period is over.")
    if not key.user.is_active:
        raise KeyRefused("User inactive or deleted.")
    if stored.secret_hash != hashes[0]:
        ApiKeySecret.objects.filter(id=stored.id, secret_hash=stored.secret_hash).update(
            secret_hash=hashes[0]
        )
    _record_use(key, now)
    return key


def _record_use(key: ApiKey, now: datetime) -> None:
    """``last_used_at``, written at most once a minute however many requests and processes: a
    conditional update that only the first of them in the minute matches."""
    interval = timedelta(seconds=settings.API_KEY_LAST_USED_INTERVAL_SECONDS)
    if key.last_used_at is not None and now - key.last_used_at < interval:
        return
    ApiKey.objects.filter(id=key.id).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - interval)
    ).update(last_used_at=now)
    key.last_used_at = now


class KeyNotCovered(ApplicationError):
    """A key asked to rotate or revoke another key of its user that holds more than it does."""

    status_code = 403
    code = "key_not_covered"


def _budget_limit(key: ApiKey) -> Decimal | None:
    budget = api_key_budget(key)
    return budget.limit_usd if budget is not None else None


def _within(value: Any, ceiling: Any) -> bool:
    """``value`` (None: unbounded) is at most ``ceiling`` (None: unbounded)."""
    return ceiling is None or (value is not None and value <= ceiling)


def api_key_grant(*, caller: ApiKey | None, request: KeyRequest) -> KeyRequest:
    """What a key may give a key it mints: no scope it lacks itself, no life beyond its own, no
    budget or rate above its own (a leaked key must not mint a wider or longer-lived one). A
    budget or rate the request leaves out is the caller's; more is refused. Returns the request
    as granted. A session (``caller`` None) may give anything."""
    if caller is None:
        return request
    for scope in request.scopes:
        if scope not in caller.scopes:
            raise InsufficientScope(scope, caller.scopes)
    if not _within(request.expires_at, caller.expires_at):
        assert caller.expires_at is not None
        raise ValidationFailed(
            "A key cannot outlive the key that creates it: expires_at must be at most "
            f"{caller.expires_at.isoformat()}.",
            code="invalid_expires_at",
            detail={"field": "expires_at", "maximum": caller.expires_at.isoformat()},
        )
    budget = api_key_budget(caller)
    limit, period = request.max_budget_usd, request.budget_period
    if budget is not None:
        if limit is None:
            limit, period = budget.limit_usd, budget.period
        elif limit > budget.limit_usd:
            raise ValidationFailed(
                "A key cannot have a larger budget than the key that creates it: "
                f"max_budget_usd must be at most {budget.limit_usd}.",
                code="invalid_max_budget_usd",
                detail={"field": "max_budget_usd", "maximum": f"{budget.limit_usd:.6f}"},
            )
    rpm = request.rpm
    if caller.rpm is not None:
        if rpm is None:
            rpm = caller.rpm
        elif rpm > caller.rpm:
            raise ValidationFailed(
                "A key cannot submit faster than the key that creates it: rpm must be at most "
                f"{caller.rpm}.",
                code="invalid_rpm",
                detail={"field": "rpm", "maximum": caller.rpm},
            )
    return replace(request, max_budget_usd=limit, budget_period=period, rpm=rpm)


def api_key_check_covers(*, caller: ApiKey | None, target: ApiKey, action: str) -> None:
    """A key may rotate or revoke another key of its user only if it holds at least what that
    key holds: its scopes, its lifetime, its budget and its rate. Otherwise a narrow key could
    take over (rotate) or cut off (revoke) a wider one. A key may always act on itself; a
    session on any key of its user."""
    if caller is None or caller.id == target.id:
        return
    problems = []
    missing = [scope for scope in target.scopes if scope not in caller.scopes]
    if missing:
        problems.append(f"the scopes {', '.join(missing)}")
    if not _within(target.expires_at, caller.expires_at):
        problems.append("a longer lifetime")
    if not _within(_budget_limit(target), _budget_limit(caller)):
        problems.append("a larger budget")
    if not _within(target.rpm, caller.rpm):
        problems.append("a higher rate")
    if problems:
        raise KeyNotCovered(
            f"This API key cannot {action} key {target.id}: that key holds "
            f"{' and '.join(problems)} beyond this one. Use a key that holds at least what it "
            "holds, or sign in.",
            detail={"key_id": target.id, "wider": problems},
        )
