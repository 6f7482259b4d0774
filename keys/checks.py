"""The API keys' deploy check: a hash secret printed in the source is no secret.

Registered with ``deploy=True``: ``manage.py check --deploy`` runs it beside Django's own
security checks; development (``make run``, ``make token``, the tests) keeps the development
value. Pure (settings only), as every check module (llmops/checks.py).
"""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning

from keys.hashing import DEVELOPMENT_HASH_SECRETS

__all__ = ["check_api_key_hash_secret"]

_NEW_SECRET = 'python -c "import secrets; print(secrets.token_urlsafe(50))"'


@register(Tags.security, deploy=True)
def check_api_key_hash_secret(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    if settings.API_KEY_HASH_SECRET in DEVELOPMENT_HASH_SECRETS:
        messages.append(
            Error(
                "API_KEY_HASH_SECRET is the development value printed in the source (it is "
                "unset and so is DJANGO_SECRET_KEY, or it is set to that value): a copy of the "
                "database can be checked against a guess, and the demo key's secret computed.",
                hint=f"Set API_KEY_HASH_SECRET to 50 or more random characters ({_NEW_SECRET}) "
                "and keep it as long as the keys; keys hashed under the development value work "
                "until their next use with it in API_KEY_HASH_SECRET_FALLBACKS "
                "(docs/operations.md#api-keys).",
                id="keys.E001",
            )
        )
    if DEVELOPMENT_HASH_SECRETS.intersection(settings.API_KEY_HASH_SECRET_FALLBACKS):
        messages.append(
            CheckWarning(
                "API_KEY_HASH_SECRET_FALLBACKS holds the development value printed in the "
                "source: keys hashed under it are still accepted.",
                hint="Remove it once the keys in use have been used since the change (their "
                "last_used_at); each was hashed again under API_KEY_HASH_SECRET then.",
                id="keys.W001",
            )
        )
    return messages
