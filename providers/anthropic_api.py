"""The Anthropic provider: the Messages API (``ANTHROPIC_BASE_URL``: the real one, or the fake
provider), its limits, and its call through the official SDK (providers/anthropic_sdk.py).

The SDK is imported on the first call or warm-up, not with this module: every process builds
the provider (a submit reads its limits for the job's timeout), and importing the SDK costs
about two seconds of CPU that only the llm worker needs to spend.
"""

from typing import Any

from providers import limits
from providers.base import ProviderOutcome, ProviderRequest
from providers.errors import name_the_key
from providers.models import DEFAULT_PROVIDER

__all__ = ["AnthropicProvider"]


class AnthropicProvider:
    """The Messages API, one streamed call per attempt. Without arguments: the ``anthropic``
    row as it has always been configured (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``)."""

    def __init__(
        self,
        name: str = DEFAULT_PROVIDER,
        base_url: str = "",
        api_key: str | None = None,
        api_key_env: str = "ANTHROPIC_API_KEY",
    ) -> None:
        self.name = name
        self.base_url = base_url
        self.api_key = api_key
        self.api_key_env = api_key_env
        """Where the key comes from, for a 401's message (never the key)."""

    def call(self, request: ProviderRequest) -> ProviderOutcome:
        """One streamed Messages API call; with a ``deadline``, it ends by then whatever the
        provider sends, or at once when cancelled (providers/call_deadline.py)."""
        if request.kind != "chat":
            # The Messages API has no embeddings: such a model is refused when it is priced
            # (providers/services.py), so only a row edited by hand can get here.
            return ProviderOutcome(
                "error_response",
                0,
                http_status=400,
                error_type="invalid_request_error",
                message=f"Not sent: the {self.name} provider (Messages API) has no embeddings.",
                request_sent=False,
            )
        from providers import anthropic_sdk

        outcome = anthropic_sdk.call(request, base_url=self.base_url, api_key=self.api_key)
        return name_the_key(outcome, provider=self.name, api_key_env=self.api_key_env)

    def count_tokens(self, body: dict[str, Any]) -> ProviderOutcome:
        """The Messages API's token count of ``body`` (the front door's ``count_tokens``)."""
        from providers import anthropic_sdk

        outcome = anthropic_sdk.count_tokens(body, base_url=self.base_url, api_key=self.api_key)
        return name_the_key(outcome, provider=self.name, api_key_env=self.api_key_env)

    def warm_up(self) -> None:
        from providers import anthropic_sdk

        anthropic_sdk.warm_up()

    def read_timeout_for(self, max_tokens: int) -> float:
        return limits.read_timeout_for(max_tokens)

    def call_deadline_for(self, max_tokens: int) -> float:
        return limits.call_deadline_for(max_tokens)
