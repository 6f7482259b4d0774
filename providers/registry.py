"""Which provider serves a model. Today every model is Anthropic's."""

import functools

from providers.anthropic_api import AnthropicProvider
from providers.base import Provider

__all__ = ["get_provider", "provider_for", "warm_up_providers"]


@functools.cache
def get_provider() -> Provider:
    """The default provider: the one a call goes to when its model names no other."""
    return AnthropicProvider()


def provider_for(model: str) -> Provider:
    """The provider that serves ``model``."""
    return get_provider()


def warm_up_providers() -> None:
    """Load and prepare every provider a call may go to (each does it once per process; its
    SDK is not imported before)."""
    get_provider().warm_up()
