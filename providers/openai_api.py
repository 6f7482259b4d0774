"""An OpenAI-compatible provider (a row of kind ``openai``): Chat Completions and Embeddings at
its ``base_url``, called through the official ``openai`` SDK (providers/openai_sdk.py), which is
imported on the first call."""

from providers import limits
from providers.base import ProviderOutcome, ProviderRequest
from providers.errors import name_the_key

__all__ = ["OpenAICompatProvider"]


class OpenAICompatProvider:
    """Chat Completions, one streamed call per attempt, the job body translated at the edge."""

    def __init__(self, *, name: str, base_url: str, api_key: str, api_key_env: str = "") -> None:
        self.name = name
        self.base_url = base_url
        self.api_key = api_key
        self.api_key_env = api_key_env
        """Where the key comes from, for a 401's message (never the key)."""

    def call(self, request: ProviderRequest) -> ProviderOutcome:
        from providers import openai_sdk

        if request.kind == "embedding":
            outcome = openai_sdk.embed(request, base_url=self.base_url, api_key=self.api_key)
        else:
            outcome = openai_sdk.call(request, base_url=self.base_url, api_key=self.api_key)
        return name_the_key(outcome, provider=self.name, api_key_env=self.api_key_env)

    def warm_up(self) -> None:
        from providers import openai_sdk  # noqa: F401  (the SDK's import, once per process)

    def read_timeout_for(self, max_tokens: int) -> float:
        return limits.read_timeout_for(max_tokens)

    def call_deadline_for(self, max_tokens: int) -> float:
        return limits.call_deadline_for(max_tokens)
