"""API key secrets: how one is made, how it is stored (a keyed hash) and what a list shows.

A secret is ``llmq_`` and 256 random bits (43 characters of base64url). The database keeps
``HMAC-SHA256(hash key, secret)`` only: the secrets are random, so a slow password hash adds
nothing, and the hash key (``API_KEY_HASH_SECRET``, never in the database) means a copy of the
database or of a backup cannot even be checked against a guess. Rotating the hash key:
the old one goes to ``API_KEY_HASH_SECRET_FALLBACKS`` and each key is hashed again under the
new one at its next use (docs/operations.md#api-keys). Without ``API_KEY_HASH_SECRET`` the hash
key is derived from ``DJANGO_SECRET_KEY``, or from the development key printed in the source,
which ``check --deploy`` refuses (keys/checks.py).
"""

import hashlib
import hmac
import secrets

from django.conf import settings

from llmops.env import DEVELOPMENT_SECRET_KEY

__all__ = [
    "DEVELOPMENT_HASH_SECRETS",
    "PREFIX_LENGTH",
    "SECRET_PREFIX",
    "candidate_hashes",
    "derived_hash_secret",
    "display_prefix",
    "new_secret",
    "secret_hash",
]

SECRET_PREFIX = "llmq_"
"""What every key this product issues starts with: secret scanners (GitHub's, a company's
own) can be taught to spot one that leaked into a repository."""
SECRET_BYTES = 32
PREFIX_LENGTH = 12
"""Characters of the secret a list shows (``llmq_`` and seven more, 42 bits: enough to tell
keys apart, nothing towards guessing the other 214)."""
MAX_SECRET_LENGTH = 200
"""Longer values are not keys of ours and are not hashed (a header of megabytes)."""


def derived_hash_secret(secret_key: str) -> str:
    """``API_KEY_HASH_SECRET`` when it is not set: one derived from ``DJANGO_SECRET_KEY``, or from
    the development key when that is not set either (llmops/settings.py)."""
    return f"derived:{secret_key}"


DEVELOPMENT_HASH_SECRETS = frozenset(
    {DEVELOPMENT_SECRET_KEY, derived_hash_secret(DEVELOPMENT_SECRET_KEY)}
)
"""Hash secrets anyone can read in this repository: under one, a copy of the database can be
checked against a guess and the demo key's secret (keys/demo.py) computed."""


def _hash_key(value: str) -> bytes:
    # One derivation for every setting's value, so that any string of any length is a key.
    return hashlib.sha256(b"llmops api key hash\x00" + value.encode()).digest()


def secret_hash(secret: str, *, hash_secret: str | None = None) -> str:
    """The stored form of ``secret``: hex HMAC-SHA256 under the current hash key (or
    ``hash_secret``)."""
    key = _hash_key(settings.API_KEY_HASH_SECRET if hash_secret is None else hash_secret)
    return hmac.new(key, secret.encode(), hashlib.sha256).hexdigest()


def candidate_hashes(secret: str) -> list[str]:
    """The hash under the current key, then under each fallback: what a stored key may hold."""
    keys = [settings.API_KEY_HASH_SECRET, *settings.API_KEY_HASH_SECRET_FALLBACKS]
    return [secret_hash(secret, hash_secret=key) for key in keys]


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def display_prefix(secret: str) -> str:
    """What lists show of a secret (for a token migrated from DRF, its first eight characters)."""
    if secret.startswith(SECRET_PREFIX):
        return secret[:PREFIX_LENGTH]
    return secret[:8]
