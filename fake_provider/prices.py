"""The fake provider's own price lists: what it bills each model, as the real APIs would
(the Messages API's, the OpenAI-compatible API's; a model it does not list is self-hosted and
free)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from decimal import Decimal

__all__ = [
    "OPENAI_PRICES",
    "PRICES",
    "SELF_HOSTED_PRICE",
    "WEB_SEARCH_USD",
    "Price",
    "openai_price_for",
    "price_for",
]


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal
    output: Decimal
    max_output_tokens: int
    model: str = ""
    """The model this is the price of: the bill is kept per model too (``billed_by_model``)."""


def _price(values: str, max_output_tokens: int) -> Price:
    inp, write_5m, write_1h, read, out = (Decimal(v) for v in values.split("/"))
    return Price(inp, write_5m, write_1h, read, out, max_output_tokens)


WEB_SEARCH_USD = Decimal("0.01")
"""The web search server tool's fee per search ($10 per 1,000 searches)."""

# The "provider's" own price list (input / 5-min write / 1-hour write / cache read / output).
PRICES: dict[str, Price] = {
    "claude-opus-4-6": _price("5/6.25/10/0.50/25", 128_000),
    "claude-opus-4-5": _price("5/6.25/10/0.50/25", 64_000),
    "claude-opus-4-1": _price("15/18.75/30/1.50/75", 32_000),
    "claude-sonnet-4-6": _price("3/3.75/6/0.30/15", 64_000),
    "claude-sonnet-4-5": _price("3/3.75/6/0.30/15", 64_000),
    "claude-sonnet-4": _price("3/3.75/6/0.30/15", 64_000),
    "claude-haiku-4-5": _price("1/1.25/2/0.10/5", 64_000),
}
PRICES = {model: replace(price, model=model) for model, price in PRICES.items()}
_DATED = re.compile(r"^(.*)-\d{8}$")


# The OpenAI-compatible API's list (openai_compat.py); any other model it is asked for is a
# self-hosted one, served at no cost (as an Ollama or vLLM would).
OPENAI_PRICES: dict[str, Price] = {
    "gpt-4o-mini": _price("0.15/0.15/0.15/0.075/0.60", 16_384),
    "gpt-4.1": _price("2/2/2/0.50/8", 32_768),
    "text-embedding-3-small": _price("0.02/0.02/0.02/0.02/0", 1),
    "text-embedding-3-large": _price("0.13/0.13/0.13/0.13/0", 1),
}
OPENAI_PRICES = {model: replace(price, model=model) for model, price in OPENAI_PRICES.items()}
SELF_HOSTED_PRICE = _price("0/0/0/0/0", 131_072)


def openai_price_for(model: str) -> Price:
    """The OpenAI-compatible API's price of a model: listed, or free (self-hosted)."""
    return OPENAI_PRICES.get(model) or replace(SELF_HOSTED_PRICE, model=model)


def price_for(model: str) -> Price | None:
    """The price of a model id, also for dated ids such as claude-sonnet-4-5-20250929."""
    if model in PRICES:
        return PRICES[model]
    match = _DATED.match(model)
    return PRICES.get(match.group(1)) if match else None
