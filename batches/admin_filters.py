"""The DLQ console's "batch" filter (alerts/admin/failures.py): the dead letters of one batch's
jobs, reached from the batch's admin page, where "requeue all matching" then works on them."""

import uuid
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet

from batches.models import Batch, BatchItem

__all__ = ["BatchFilter"]


class BatchFilter(admin.SimpleListFilter):
    """``?batch=<id>``: only in the sidebar while it filters (a list of every batch would be
    endless); the batch's page links to it."""

    title = "batch"
    parameter_name = "batch"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        if value is None:
            return []
        batch_id = self._batch_id()
        batch = Batch.objects.filter(id=batch_id).only("id", "name").first() if batch_id else None
        # Shown even for an unknown id, so that the (empty) filter applies and says so.
        return [(str(value), (batch.name or str(batch.id)) if batch else "no such batch")]

    def queryset(self, request: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() is None:
            return queryset
        batch_id = self._batch_id()
        if batch_id is None:
            return queryset.none()
        jobs = BatchItem.objects.filter(batch_id=batch_id, runs_job=True).values("job_id")
        return queryset.filter(job_id__in=jobs)

    def _batch_id(self) -> uuid.UUID | None:
        try:
            return uuid.UUID(str(self.value()))
        except ValueError:
            return None
