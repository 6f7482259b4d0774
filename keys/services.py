"""Every write on API keys: create, revoke, rotate, and what authenticating with one records.

The secret leaves these functions once, as the return value of ``api_key_create`` or
``api_key_rotate``; what is stored is its keyed hash (keys/hashing.py). Nothing here logs a
secret or puts one in an error.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from api.errors import Conflict, ValidationFailed
from keys.hashing import MAX_SECRET_LENGTH, candidate_hashes, display_prefix, new_secret
from keys.hashing import secret_hash as hash_of
from keys.models import ApiKey, ApiKeySecret
from keys.validation import KeyRequest
from ledger.models import Budget

__all__ = [
    "KeyRefused",
    "Rotation",
    "api_key_authenticate",
    "api_key_check_grant",
    "api_key_create",
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
    *, user: User, request: KeyRequest, secret: str | None = None
) -> tuple[ApiKey, str]:
    """A new key of ``user`` and its secret, which only this return value ever holds. A
    ``max_budget_usd`` becomes the key's budget (a ``ledger.Budget`` of scope ``key``), held by
    the same reservations as feature and user budgets."""
    secret = secret or new_secret()
    key = ApiKey.objects.create(
        user=user,
        name=request.name,
        prefix=display_prefix(secret),
        scopes=list(request.scopes),
        expires_at=request.expires_at,
        rpm=request.rpm,
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
    locked.prefix = display_prefix(secret)
    locked.save(update_fields=["prefix"])
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


def api_key_check_grant(*, caller: ApiKey | None, request: KeyRequest) -> None:
    """What a key may give a key it creates: no scope it lacks itself, and no life beyond its
    own (a leaked key must not mint a wider or longer-lived one). A session may give anything."""
    from keys.permissions import InsufficientScope  # keys.permissions imports the models only

    if caller is None:
        return
    for scope in request.scopes:
        if scope not in caller.scopes:
            raise InsufficientScope(scope, caller.scopes)
    if caller.expires_at is not None and (
        request.expires_at is None or request.expires_at > caller.expires_at
    ):
        raise ValidationFailed(
            "A key cannot outlive the key that creates it: expires_at must be at most "
            f"{caller.expires_at.isoformat()}.",
            code="invalid_expires_at",
            detail={"field": "expires_at", "maximum": caller.expires_at.isoformat()},
        )
