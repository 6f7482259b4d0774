from datetime import datetime
from uuid import UUID

from django.db.models import QuerySet
from django.utils import timezone

from ledger.models import CostEntry, ModelPrice


def price_for_model(*, model: str, at: datetime | None = None) -> ModelPrice | None:
    """The price in force for ``model`` at ``at`` (now by default), or None if it has none."""
    return (
        ModelPrice.objects.filter(model=model, effective_from__lte=at or timezone.now())
        .order_by("-effective_from")
        .first()
    )


def cost_entries_for_job(*, job_id: UUID) -> QuerySet[CostEntry]:
    return CostEntry.objects.filter(job_id=job_id).order_by("attempt")
