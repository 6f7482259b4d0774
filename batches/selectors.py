"""Reads of batches: the owner's (and staff's) view, the cost of a batch, its jobs."""

from collections.abc import Iterable
from decimal import Decimal
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import DecimalField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from api.errors import NotFound, ValidationFailed
from api.runs import RunFilters, filter_runs
from batches.models import Batch, BatchItem
from embeddings.storage import vectors_load
from jobs.models import LlmJob

__all__ = [
    "batch_embedding_items",
    "batch_get_for_user",
    "batch_item_vectors",
    "batch_item_indexes",
    "batch_jobs",
    "batch_list_for_user",
    "batch_with_cost",
    "batches_with_cost",
]


def batches_with_cost() -> QuerySet[Batch]:
    """Batches annotated with ``cost_usd``: the sum of their jobs' costs (each job once, however
    many items share it), read when asked, so a late ledger correction shows at once."""
    cost = (
        LlmJob.objects.filter(batch_items__batch=OuterRef("pk"), batch_items__runs_job=True)
        .order_by()
        .values("batch_items__batch")
        .annotate(total=Sum("cost_usd"))
        .values("total")[:1]
    )
    money: DecimalField = DecimalField(max_digits=16, decimal_places=6)
    return Batch.objects.annotate(
        cost_usd=Coalesce(Subquery(cost, output_field=money), Value(Decimal(0)), output_field=money)
    )


def batch_with_cost(*, batch_id: UUID) -> Batch:
    return batches_with_cost().get(id=batch_id)


def batch_get_for_user(
    *, user: User, batch_id: UUID, permission: str = "batches.view_batch"
) -> Batch:
    """The batch with its cost, if the user owns it or is staff holding ``permission`` (seeing
    another user's batch, or cancelling it with ``batches.cancel_batch``); any other batch is
    indistinguishable from a missing one."""
    batches = batches_with_cost().filter(id=batch_id)
    if not (user.is_staff and user.has_perm(permission)):
        batches = batches.filter(user=user)
    batch = batches.first()
    if batch is None:
        raise NotFound("No such batch.", code="batch_not_found")
    return batch


def batch_list_for_user(*, user: User, filters: RunFilters | None = None) -> QuerySet[Batch]:
    """The user's own batches, newest first, by the shared list filters (api/runs.py)."""
    batches = Batch.objects.filter(user=user).defer("callback_url")
    return filter_runs(batches, filters or RunFilters(), statuses=Batch.Status.values)


def batch_jobs(*, batch: Batch, status: str | None = None) -> QuerySet[LlmJob]:
    """The batch's jobs, once each, in the order of their first item."""
    jobs = LlmJob.objects.filter(
        batch_items__batch=batch, batch_items__runs_job=True
    ).select_related("provider_batch")  # a deferred job's provider batch id, no query per row
    if status:
        if status not in LlmJob.Status.values:
            raise ValidationFailed(
                f"status must be one of {', '.join(LlmJob.Status.values)}.",
                code="invalid_filter",
                detail={"field": "status"},
            )
        jobs = jobs.filter(status=status)
    # The list shows output and usage, never the request: leave its large columns unread.
    return jobs.defer(*LlmJob.REQUEST_FIELDS).order_by("batch_items__index")


def batch_item_indexes(*, batch: Batch, job_ids: Iterable[UUID]) -> dict[UUID, list[int]]:
    """The indexes of the batch's items each job runs (several for identical items)."""
    indexes: dict[UUID, list[int]] = {}
    rows = (
        BatchItem.objects.filter(batch=batch, job_id__in=list(job_ids))
        .order_by("index")
        .values_list("job_id", "index")
    )
    for job_id, index in rows:
        indexes.setdefault(job_id, []).append(index)
    return indexes


def batch_embedding_items(*, batch: Batch) -> QuerySet[BatchItem]:
    """An embedding batch's items in order, each with its job's status."""
    if batch.kind != LlmJob.Kind.EMBEDDING:
        raise ValidationFailed(
            "This batch is of kind chat: its results are its jobs' (GET .../jobs/).",
            code="not_an_embedding_batch",
            detail={"kind": batch.kind},
        )
    return (
        BatchItem.objects.filter(batch=batch)
        .select_related("job")
        .only("index", "position", "metadata", "job__id", "job__status", "job__error_code")
        .order_by("index")
    )


def batch_item_vectors(items: Iterable[BatchItem]) -> dict[tuple[UUID, int], list[float]]:
    """The vectors of a page of embedding items, read once per job: (job id, position) ->
    vector, for the items whose job completed."""
    wanted: dict[UUID, set[int]] = {}
    for item in items:
        if item.job.status == LlmJob.Status.COMPLETED and item.position is not None:
            wanted.setdefault(item.job_id, set()).add(item.position)
    vectors: dict[tuple[UUID, int], list[float]] = {}
    for job_id, positions in wanted.items():
        ordered = sorted(positions)
        for position, vector in zip(
            ordered, vectors_load(job_id=job_id, positions=ordered), strict=True
        ):
            vectors[(job_id, position)] = vector
    return vectors
