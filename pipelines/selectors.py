from decimal import Decimal
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import DecimalField, QuerySet, Sum, Value
from django.db.models.functions import Coalesce

from api.errors import NotFound
from api.runs import RunFilters, filter_runs
from jobs.models import LlmJob
from pipelines.models import Pipeline, PipelineStep

__all__ = ["pipeline_get_for_user", "pipeline_list_for_user", "pipeline_steps"]

_COST: DecimalField = DecimalField(max_digits=16, decimal_places=6)


def pipeline_get_for_user(
    *, user: User, pipeline_id: UUID, permission: str = "pipelines.view_pipeline"
) -> Pipeline:
    """The user's own pipeline, or any for staff holding ``permission`` (seeing it, or cancelling
    it with ``pipelines.cancel_pipeline``); another user's is indistinguishable from a missing
    one."""
    others = user.is_staff and user.has_perm(permission)
    pipelines = Pipeline.objects.all() if others else Pipeline.objects.filter(user=user)
    pipeline = pipelines.filter(id=pipeline_id).first()
    if pipeline is None:
        raise NotFound("No such pipeline.", code="pipeline_not_found")
    return pipeline


def pipeline_steps(*, pipeline: Pipeline) -> list[PipelineStep]:
    """Its steps in order with their jobs, in one query; the jobs' request columns (messages
    with the previous outputs filled in) stay unread."""
    return list(
        PipelineStep.objects.filter(pipeline=pipeline)
        .select_related("job")
        .defer(*(f"job__{field}" for field in LlmJob.REQUEST_FIELDS))
        .order_by("index")
    )


def pipeline_list_for_user(*, user: User, filters: RunFilters | None = None) -> QuerySet[Pipeline]:
    """The user's own pipelines, newest first, by the shared list filters (api/runs.py), each
    with ``cost_usd``: what its steps' jobs cost so far (the sum of their ledger rows, as each
    job's ``cost_usd``)."""
    pipelines = filter_runs(
        Pipeline.objects.filter(user=user), filters or RunFilters(), statuses=Pipeline.Status.values
    )
    return pipelines.annotate(
        cost_usd=Coalesce(Sum("steps__job__cost_usd"), Value(Decimal(0)), output_field=_COST)
    )
