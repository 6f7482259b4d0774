from decimal import Decimal
from typing import Any

import pytest

from ledger.price_table import model_price_set
from providers.services import provider_save

EMBEDDING_MODEL = "text-embedding-3-small"
SELF_HOSTED_EMBEDDING = "nomic-embed-text"


@pytest.fixture
def local_openai(fake_provider: Any, prices: Any) -> str:
    """``local-openai`` at the fake provider's OpenAI-compatible API, with an embedding model at
    OpenAI's price, a free self-hosted one and a chat model."""
    provider_save(name="local-openai", kind="openai", base_url=f"{fake_provider.url}/openai/v1")
    model_price_set(
        model=EMBEDDING_MODEL,
        provider="local-openai",
        input_per_mtok=Decimal("0.02"),
        output_per_mtok=Decimal(0),
        kind="embedding",
    )
    model_price_set(
        model=SELF_HOSTED_EMBEDDING,
        provider="local-openai",
        input_per_mtok=Decimal(0),
        output_per_mtok=Decimal(0),
        kind="embedding",
    )
    model_price_set(
        model="gpt-4o-mini",
        provider="local-openai",
        input_per_mtok=Decimal("0.15"),
        output_per_mtok=Decimal("0.60"),
        max_output_tokens=16_384,
    )
    return "local-openai"
