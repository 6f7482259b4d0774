"""Which provider serves a model: the provider row of the model's price in force
(``ledger.ModelPrice.provider``), built once per configuration and kept."""

import functools
from dataclasses import dataclass

from providers.anthropic_api import AnthropicProvider
from providers.base import Provider
from providers.models import DEFAULT_PROVIDER
from providers.models import Provider as ProviderRow
from providers.selectors import provider_api_key, provider_name_for_model, provider_row

__all__ = ["ProviderConfig", "get_provider", "provider_for", "provider_named", "warm_up_providers"]


@dataclass(frozen=True)
class ProviderConfig:
    """What building a provider needs from its row (the key read from its variable)."""

    name: str
    kind: str
    base_url: str
    api_key_env: str
    api_key: str


@functools.cache
def get_provider() -> Provider:
    """The default provider: the ``anthropic`` row as it has always been configured
    (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``)."""
    return AnthropicProvider()


def _config(name: str, row: ProviderRow | None) -> ProviderConfig | None:
    if row is None:
        return None
    return ProviderConfig(
        name=row.name,
        kind=row.kind,
        base_url=row.base_url,
        api_key_env=row.api_key_env,
        api_key=provider_api_key(api_key_env=row.api_key_env),
    )


@functools.lru_cache(maxsize=64)
def _build(config: ProviderConfig) -> Provider:
    if config.kind == ProviderRow.Kind.OPENAI:
        from providers.openai_api import OpenAICompatProvider

        return OpenAICompatProvider(
            name=config.name,
            base_url=config.base_url,
            api_key=config.api_key,
            api_key_env=config.api_key_env,
        )
    if (config.name, config.base_url, config.api_key_env) == (
        DEFAULT_PROVIDER,
        "",
        "ANTHROPIC_API_KEY",
    ):
        return get_provider()
    # The row's own key ('' if none): never ANTHROPIC_API_KEY by default, which would send
    # the real key to whatever base URL the row names.
    return AnthropicProvider(
        name=config.name,
        base_url=config.base_url,
        api_key=config.api_key,
        api_key_env=config.api_key_env,
    )


def provider_named(name: str) -> Provider:
    """The provider of row ``name``; the default provider when ``anthropic`` has no row (a
    database flushed by a test)."""
    config = _config(name, provider_row(name=name))
    if config is None:
        if name != DEFAULT_PROVIDER:
            raise LookupError(f"provider {name!r} has no row")
        return get_provider()
    return _build(config)


def provider_for(model: str) -> Provider:
    """The provider that serves ``model``."""
    return provider_named(provider_name_for_model(model=model))


def warm_up_providers() -> None:
    """Load and prepare every provider a call may go to (each does it once per process; its
    SDK is not imported before). The OpenAI-compatible SDK is loaded on its first call."""
    get_provider().warm_up()
