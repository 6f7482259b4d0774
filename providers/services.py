"""Writes of the provider rows: ``manage.py llm_provider`` and the admin save through here."""

import logging
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction

from api.errors import ValidationFailed
from jobs.pauses import PROVIDER_PAUSED
from jobs.services import jobs_unpark
from providers.key_envs import key_env_problem
from providers.models import Provider
from providers.selectors import provider_models

__all__ = ["provider_pause", "provider_save"]

logger = logging.getLogger(__name__)


@transaction.atomic
def provider_save(
    *,
    name: str,
    kind: str,
    base_url: str = "",
    api_key_env: str = "",
    enabled: bool = True,
) -> tuple[Provider, bool]:
    """Create the provider ``name``, or change it if it exists. Returns it and whether it was
    created. An ``openai`` provider needs its ``base_url``; ``api_key_env`` is the NAME of the
    environment variable holding the key, never a key."""
    provider = Provider.objects.select_for_update().filter(name=name).first()
    created = provider is None
    if provider is None:
        provider = Provider(name=name)
    provider.kind, provider.base_url = kind, base_url.rstrip("/")
    provider.api_key_env, provider.enabled = api_key_env, enabled
    provider_check(provider)
    provider.save()
    return provider, created


@transaction.atomic
def provider_pause(*, name: str, paused: bool, by: object = None) -> Provider:
    """Pause a provider (its models' jobs are accepted and wait, nothing is sent to it) or
    resume it (its parked jobs go back on the queue in submit order, after the commit)."""
    provider = Provider.objects.select_for_update().filter(name=name).first()
    if provider is None:
        raise ValidationFailed(
            f"No provider named {name!r}.", code="unknown_provider", detail={"provider": name}
        )
    if provider.paused == paused:
        return provider
    provider.paused = paused
    provider.save(update_fields=["paused", "updated_at"])
    logger.warning(
        "provider %s %s by %s", name, "paused" if paused else "resumed", by or "a command"
    )
    if not paused:
        transaction.on_commit(
            lambda: jobs_unpark(reason=PROVIDER_PAUSED, models=provider_models(names={name})),
            robust=True,
        )
    return provider


def provider_check(provider: Provider) -> None:
    """The row's fields, each checked (``ValidationFailed`` naming the first bad one)."""
    try:
        provider.full_clean(validate_unique=False)
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise ValidationFailed(
            f"{field}: {' '.join(messages)}", code="invalid_provider", detail={"field": field}
        ) from None
    url = urlsplit(provider.base_url)
    if provider.base_url and (url.scheme not in ("http", "https") or not url.netloc):
        # Not Django's URLValidator: a self-hosted server is often a bare host name
        # (http://vllm:8000/v1 inside a compose network), which that refuses.
        raise ValidationFailed(
            f"base_url: {provider.base_url!r} is not an http:// or https:// URL",
            code="invalid_provider",
            detail={"field": "base_url"},
        )
    if provider.kind == Provider.Kind.OPENAI and not provider.base_url:
        raise ValidationFailed(
            "base_url: an openai provider needs the URL of its API, e.g. "
            "https://api.openai.com/v1 or http://127.0.0.1:11434/v1",
            code="invalid_provider",
            detail={"field": "base_url"},
        )
    if provider.api_key_env and provider.api_key_env.lower().startswith(("sk-", "sk_")):
        raise ValidationFailed(
            "api_key_env: give the NAME of the environment variable that holds the key "
            "(e.g. OPENAI_API_KEY), never the key itself",
            code="invalid_provider",
            detail={"field": "api_key_env"},
        )
    problem = key_env_problem(provider.api_key_env)
    if problem:
        raise ValidationFailed(
            f"api_key_env: {problem}", code="invalid_provider", detail={"field": "api_key_env"}
        )
