"""Reads of the provider rows: which provider serves a model, and where its key is.

Both come from the process's copy of the price table and the providers (ledger/config_cache.py)
when it is current: every attempt and every submit asks.
"""

import logging
import os

from django.conf import settings

from providers.key_envs import key_env_problem
from providers.models import DEFAULT_PROVIDER, Provider

logger = logging.getLogger(__name__)

__all__ = ["provider_api_key", "provider_models", "provider_name_for_model", "provider_row"]


def provider_name_for_model(*, model: str) -> str:
    """The provider of the price in force for ``model``; ``anthropic`` for a model without one
    (a submit refuses it; a job that lost its price since still runs where it always did)."""
    from ledger.selectors import price_for_model

    price = price_for_model(model=model)
    return price.provider_name if price is not None else DEFAULT_PROVIDER


def provider_row(*, name: str) -> Provider | None:
    """The row of provider ``name``, or None. The row is shared: never change it."""
    from ledger.config_cache import config_snapshot

    snapshot = config_snapshot()
    if snapshot is not None:
        return snapshot.providers.get(name)
    return Provider.objects.filter(name=name).first()


def provider_api_key(*, api_key_env: str) -> str:
    """The key in the environment variable the row names ('' without one). ``ANTHROPIC_API_KEY``
    is read through the settings, as it always was (and as tests override it)."""
    if not api_key_env:
        return ""
    problem = key_env_problem(api_key_env)
    if problem:
        # A row written before the rule, or by hand in the database: its variable is never
        # read, so nothing it names can be sent anywhere.
        logger.error("provider key variable refused, no key sent: %s", problem)
        return ""
    if api_key_env == "ANTHROPIC_API_KEY":
        return str(settings.ANTHROPIC_API_KEY)
    return os.environ.get(api_key_env, "")


def provider_models(*, names: set[str]) -> set[str]:
    """The models whose price in force belongs to one of the providers ``names``."""
    from django.utils import timezone

    from ledger.models import ModelPrice

    now = timezone.now()
    latest: dict[str, str] = {}
    rows = ModelPrice.objects.filter(effective_from__lte=now).order_by("model", "-effective_from")
    for model, provider in rows.values_list("model", "provider_id"):
        latest.setdefault(model, str(provider))
    return {model for model, provider in latest.items() if provider in names}
