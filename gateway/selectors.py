"""The reads of a front-door call: the job as it ended, its vectors, and the models a door
offers."""

import array
import sys
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.utils import timezone

from embeddings.storage import vectors_load
from jobs.models import LlmJob
from ledger.models import ModelPrice
from providers.models import Provider

__all__ = ["DoorModel", "door_models", "job_read", "job_vectors", "vector_bytes"]


def job_read(*, job_id: UUID) -> LlmJob:
    """The job as it is now, its request columns left unread (an answer shows none of them)."""
    return LlmJob.objects.defer("messages", "system", "input").get(id=job_id)


def job_vectors(*, job_id: UUID) -> list[list[float]]:
    """A completed embedding job's vectors, in input order."""
    return vectors_load(job_id=job_id)


def vector_bytes(vector: list[float]) -> bytes:
    """A vector as float32 little-endian bytes (how the OpenAI API's base64 encodes it)."""
    values = array.array("f", vector)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


@dataclass(frozen=True)
class DoorModel:
    id: str
    kind: str
    """chat or embedding."""
    provider: str
    created: datetime
    """When its first price took effect."""


def door_models(*, kind: str | None = None) -> list[DoorModel]:
    """Every model with a price in force on an enabled provider (of ``kind`` if given), by name:
    what a call may name. The price table is small (a row per model and price change)."""
    disabled = set(Provider.objects.filter(enabled=False).values_list("name", flat=True))
    in_force: dict[str, ModelPrice] = {}
    first: dict[str, datetime] = {}
    prices = ModelPrice.objects.filter(effective_from__lte=timezone.now()).select_related(
        "provider"
    )
    for price in prices.order_by("model", "effective_from"):
        first.setdefault(price.model, price.effective_from)
        in_force[price.model] = price
    return [
        DoorModel(name, price.kind, price.provider_name, first[name])
        for name, price in sorted(in_force.items())
        if price.provider_name not in disabled and (kind is None or price.kind == kind)
    ]
