"""Writes of the price table: a model's provider, kind, prices and output limit
(``manage.py llm_model add``).

A price row in force may have priced attempts already, so a change is a new row effective now
(history is never rewritten); setting what is already in force writes nothing.
"""

from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from api.errors import ValidationFailed
from ledger.models import ModelPrice
from providers.models import Provider

__all__ = ["DEFAULT_MAX_OUTPUT_TOKENS", "ModelPriceChange", "model_price_set"]

DEFAULT_MAX_OUTPUT_TOKENS = 4096
"""A new model's output limit when none is given: a common default of OpenAI-compatible
servers (``--max-output-tokens`` sets the model's own)."""

_RATES = (
    "input_per_mtok",
    "output_per_mtok",
    "cache_write_5m_per_mtok",
    "cache_write_1h_per_mtok",
    "cache_read_per_mtok",
)
_COMPARED = ("provider_name", "kind", *_RATES, "max_output_tokens")


@dataclass(frozen=True)
class ModelPriceChange:
    price: ModelPrice
    """The row in force after the change."""
    created: bool
    """A first row for this model."""
    changed: bool
    """A new row was written (False: what was asked is already in force)."""


def _usd(value: Decimal, name: str) -> Decimal:
    if not value.is_finite() or value < 0 or value >= Decimal("1e8"):
        raise ValidationFailed(
            f"{name} must be a price in USD per million tokens, 0 or more.",
            code="invalid_price",
            detail={"field": name},
        )
    return value.quantize(Decimal("0.0001"))


@transaction.atomic
def model_price_set(
    *,
    model: str,
    provider: str,
    input_per_mtok: Decimal,
    output_per_mtok: Decimal,
    cache_read_per_mtok: Decimal | None = None,
    max_output_tokens: int | None = None,
    kind: str = ModelPrice.Kind.CHAT,
) -> ModelPriceChange:
    """Price ``model`` on ``provider`` from now on. Both prices may be 0 (a self-hosted model:
    its jobs are still counted, timed and metered in tokens). Cache writes cost the input price
    (OpenAI-compatible APIs bill no write premium); cache reads cost ``cache_read_per_mtok``,
    by default the input price. Without ``max_output_tokens``, the model keeps its limit (a new
    one: ``DEFAULT_MAX_OUTPUT_TOKENS``)."""
    model = model.strip()
    if not model or len(model) > 100 or any(c.isspace() for c in model):
        raise ValidationFailed(
            "MODEL must be a model id of at most 100 characters, without spaces.",
            code="invalid_model",
            detail={"field": "model"},
        )
    owner = Provider.objects.filter(name=provider).first()
    if owner is None:
        known = ", ".join(Provider.objects.values_list("name", flat=True)) or "none"
        raise ValidationFailed(
            f"Provider {provider!r} does not exist (providers: {known}); add it first with "
            "`manage.py llm_provider add`.",
            code="unknown_provider",
            detail={"field": "provider"},
        )
    if kind not in ModelPrice.Kind.values:
        raise ValidationFailed(
            f"kind must be one of {ModelPrice.Kind.values}.", code="invalid_kind"
        )
    if kind == ModelPrice.Kind.EMBEDDING and owner.kind != Provider.Kind.OPENAI:
        raise ValidationFailed(
            f"Provider {provider!r} speaks the {owner.get_kind_display()}, which has no "
            "embeddings: an embedding model belongs to an OpenAI-compatible provider.",
            code="invalid_kind",
            detail={"field": "provider"},
        )
    if max_output_tokens is not None and not 1 <= max_output_tokens <= 10_000_000:
        raise ValidationFailed(
            "max_output_tokens must be a whole number of tokens, at least 1.",
            code="invalid_max_tokens",
            detail={"field": "max_output_tokens"},
        )
    input_rate = _usd(input_per_mtok, "input_price")
    read_rate = _usd(
        input_rate if cache_read_per_mtok is None else cache_read_per_mtok, "cache_read_price"
    )
    # Serialises two writers of one model's rows (the unique start guards the rest).
    current_rows = list(ModelPrice.objects.select_for_update().filter(model=model))
    now = timezone.now()
    in_force = [row for row in current_rows if row.effective_from <= now]
    current = max(in_force, key=lambda row: row.effective_from) if in_force else None
    wanted = ModelPrice(
        model=model,
        provider=owner,
        kind=kind,
        effective_from=now,
        input_per_mtok=input_rate,
        output_per_mtok=_usd(output_per_mtok, "output_price"),
        cache_write_5m_per_mtok=input_rate,
        cache_write_1h_per_mtok=input_rate,
        cache_read_per_mtok=read_rate,
        max_output_tokens=max_output_tokens
        or (current.max_output_tokens if current else DEFAULT_MAX_OUTPUT_TOKENS),
    )
    if current is not None:
        if current.provider_name == owner.name:
            # Anthropic's rows price cache writes above input: what is not asked stays.
            wanted.cache_write_5m_per_mtok = max(input_rate, current.cache_write_5m_per_mtok)
            wanted.cache_write_1h_per_mtok = max(input_rate, current.cache_write_1h_per_mtok)
        if all(getattr(current, f) == getattr(wanted, f) for f in _COMPARED):
            return ModelPriceChange(current, created=False, changed=False)
        wanted.batch_discount = current.batch_discount
        wanted.web_search_per_request = current.web_search_per_request
    wanted.save()
    return ModelPriceChange(wanted, created=not current_rows, changed=True)
