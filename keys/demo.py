"""The demo user's API key under ``make run``: created once, printed in the ready banner and by
``make token`` as often as asked, without its secret being stored anywhere.

The demo key's secret is derived from the hash key and the key's id (an HMAC), so that it can
be printed again: anyone holding ``API_KEY_HASH_SECRET`` could derive it, which is why only the
demo user's key named ``demo`` is made this way, by the development commands alone. Every other
key's secret is random and shown once."""

import base64
import hashlib
import hmac

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from keys.hashing import SECRET_PREFIX, display_prefix, secret_hash
from keys.models import ApiKey, ApiKeySecret
from keys.scopes import ALL_SCOPES

__all__ = ["DEMO_KEY_NAME", "demo_key_ensure"]

DEMO_KEY_NAME = "demo"


def _derived_secret(key_id: int) -> str:
    digest = hmac.new(
        hashlib.sha256(b"llmops demo key\x00" + settings.API_KEY_HASH_SECRET.encode()).digest(),
        f"demo-key:{key_id}".encode(),
        hashlib.sha256,
    ).digest()
    return SECRET_PREFIX + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def demo_key_ensure(*, user: User) -> str:
    """The secret of ``user``'s demo key (every scope, no expiry), the key created first if it
    has none that still works (revoked, expired, rotated, or the hash key changed)."""
    for key in ApiKey.objects.filter(user=user, name=DEMO_KEY_NAME, revoked_at__isnull=True):
        secret = _derived_secret(key.id)
        usable = key.secrets.filter(secret_hash=secret_hash(secret), expires_at__isnull=True)
        if key.is_active and usable.exists():
            return secret
    with transaction.atomic():
        key = ApiKey.objects.create(
            user=user, name=DEMO_KEY_NAME, prefix="", scopes=list(ALL_SCOPES)
        )
        secret = _derived_secret(key.id)
        ApiKeySecret.objects.create(
            key=key, secret_hash=secret_hash(secret), prefix=display_prefix(secret)
        )
        key.prefix = display_prefix(secret)
        key.save(update_fields=["prefix"])
    return secret
