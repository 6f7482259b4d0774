"""A key with every scope in one call, for tests, benchmarks and drills (not for production
code: a real integration gets the least scope it needs)."""

from django.contrib.auth.models import User

from keys.scopes import ALL_SCOPES
from keys.services import api_key_create
from keys.validation import KeyRequest

__all__ = ["api_key_for"]


def api_key_for(user: User, *, scopes: list[str] | None = None, name: str = "test") -> str:
    """The secret of a new key of ``user`` (every scope unless ``scopes`` says otherwise)."""
    scopes = list(ALL_SCOPES) if scopes is None else scopes
    _key, secret = api_key_create(user=user, request=KeyRequest(name=name, scopes=scopes))
    return secret
