"""The cost calculator: tokens x rate / 1e6, in Decimal, per token kind."""

import json
import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from ledger.models import ModelPrice

__all__ = ["TOKEN_KINDS", "attempt_cost", "estimate_input_tokens", "upper_bound_cost"]

MILLION = Decimal(1_000_000)
MICRO_USD = Decimal("0.000001")

TOKEN_KINDS: dict[str, str] = {
    "input_tokens": "input_per_mtok",
    "output_tokens": "output_per_mtok",
    "cache_write_5m_tokens": "cache_write_5m_per_mtok",
    "cache_write_1h_tokens": "cache_write_1h_per_mtok",
    "cache_read_tokens": "cache_read_per_mtok",
}
"""Usage field -> ModelPrice rate field."""


def attempt_cost(price: ModelPrice, usage: dict[str, int], *, batch: bool = False) -> Decimal:
    total = sum(
        (Decimal(usage.get(kind, 0)) * getattr(price, rate) for kind, rate in TOKEN_KINDS.items()),
        Decimal(0),
    )
    if batch:
        total *= Decimal(1) - price.batch_discount
    return (total / MILLION).quantize(MICRO_USD, rounding=ROUND_HALF_UP)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def estimate_input_tokens(*, messages: list[dict[str, Any]], system: Any = None) -> int:
    """An upper bound on input tokens: Claude averages ~3.5 characters a token; take 3, plus
    per-message framing, so that an estimate is never below what the provider bills."""
    chars = sum(len(_text_of(m.get("content", ""))) for m in messages)
    if system is not None:
        chars += len(_text_of(system))
    return math.ceil(chars / 3) + 8 * (len(messages) + 1)


def upper_bound_cost(
    price: ModelPrice, *, messages: list[dict[str, Any]], system: Any, max_tokens: int
) -> Decimal:
    """The most an attempt can cost: every input token at the dearest input rate (a 1-hour
    cache write) and the whole ``max_tokens`` at the output rate."""
    input_rate = max(
        price.input_per_mtok, price.cache_write_5m_per_mtok, price.cache_write_1h_per_mtok
    )
    tokens_in = Decimal(estimate_input_tokens(messages=messages, system=system))
    total = tokens_in * input_rate + Decimal(max_tokens) * price.output_per_mtok
    return (total / MILLION).quantize(MICRO_USD, rounding=ROUND_HALF_UP)
