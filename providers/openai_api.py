"""An OpenAI-compatible provider (a row of kind ``openai``): Chat Completions and Embeddings at
its ``base_url``, called through the official ``openai`` SDK (providers/openai_sdk.py), which is
imported on the first call."""

from providers import limits
from providers.base import ProviderOutcome, ProviderRequest

__all__ = ["OpenAICompatProvider"]


class OpenAICompatProvider:
    """Chat Completions, one streamed call per attempt, the job body translated at the edge."""

    def __init__(self, *, name: str, base_url: str, api_key: str) -> None:
        self.name = name
        self.base_url = base_url
        self.api_key = api_key

    def call(self, request: ProviderRequest) -> ProviderOutcome:
        from providers import openai_sdk

        if request.kind == "embedding":
            return openai_sdk.embed(request, base_url=self.base_url, api_key=self.api_key)
        return openai_sdk.call(request, base_url=self.base_url, api_key=self.api_key)

    def warm_up(self) -> None:
        from providers import openai_sdk  # noqa: F401  (the SDK's import, once per process)

    def read_timeout_for(self, max_tokens: int) -> float:
        return limits.read_timeout_for(max_tokens)

    def call_deadline_for(self, max_tokens: int) -> float:
        return limits.call_deadline_for(max_tokens)
