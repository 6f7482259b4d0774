"""Thin DRF views of /api/v1/pipelines/: validate, call a service or selector, serialize."""

from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers

from api.run_views import (
    RunCancelApi,
    RunDetailApi,
    RunList,
    RunListCreateApi,
    RunResource,
    RunSubmit,
)
from jobs.api_schema import JobErrorSerializer, JobOutputTextSerializer
from jobs.models import LlmJob
from jobs.selectors import job_output
from pipelines.api_schema import (
    SUBMIT_EXAMPLE,
    PipelineSubmitSerializer,
    PipelineSubmittedSerializer,
)
from pipelines.models import Pipeline, PipelineStep
from pipelines.selectors import pipeline_get_for_user, pipeline_list_for_user, pipeline_steps
from pipelines.services import pipeline_cancel, pipeline_create

STEP_STATUSES = ["pending", *LlmJob.Status.values]
_COST_USD = serializers.DecimalField(max_digits=16, decimal_places=6, coerce_to_string=True)
"""How a ``cost_usd`` rendered by hand (a 6-decimal string) appears in the schema."""

_SUBMIT_400 = [
    "invalid_body",
    "unknown_field",
    "invalid_name",
    "invalid_deadline",
    "invalid_tags",
    "invalid_steps",
    "too_many_steps",
]


class PipelineStepErrorSerializer(JobErrorSerializer):
    """The job's last error; for a step refused when it was to start (no job), the refusal,
    with ``http_status`` and ``severity`` null."""

    severity = serializers.CharField(allow_null=True)  # type: ignore[assignment]


class PipelineStepSerializer(serializers.Serializer):
    """A step: its job's fields once it has one (as in GET /api/v1/jobs/<id>/)."""

    index = serializers.IntegerField(help_text="From 0, in the order submitted.")
    status = serializers.SerializerMethodField()
    job_id = serializers.UUIDField(allow_null=True, help_text="null until the step starts.")
    feature = serializers.SerializerMethodField()
    model = serializers.SerializerMethodField()
    attempts = serializers.SerializerMethodField()
    started_at = serializers.DateTimeField(source="job.started_at", default=None, allow_null=True)
    completed_at = serializers.DateTimeField(
        source="job.completed_at", default=None, allow_null=True
    )
    output = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    cost_usd = serializers.SerializerMethodField()

    @extend_schema_field(serializers.ChoiceField(choices=STEP_STATUSES))
    def get_status(self, step: PipelineStep) -> str:
        return step.status_in(self.context["pipeline_status"])

    def get_feature(self, step: PipelineStep) -> str:
        return step.job.feature if step.job else str(step.request["feature"])

    def get_model(self, step: PipelineStep) -> str:
        # The job's: a requeue from the DLQ may have moved it to another model.
        return step.job.model if step.job else str(step.request["model"])

    def get_attempts(self, step: PipelineStep) -> int:
        return step.job.attempts if step.job else 0

    @extend_schema_field(JobOutputTextSerializer(allow_null=True))
    def get_output(self, step: PipelineStep) -> dict | None:
        return None if step.job is None else job_output(step.job)

    @extend_schema_field(PipelineStepErrorSerializer(allow_null=True))
    def get_error(self, step: PipelineStep) -> dict | None:
        job = step.job
        if job is None:
            if not step.error_code:
                return None
            return {
                "code": step.error_code,
                "http_status": None,
                "message": step.error_message,
                "severity": None,
            }
        if not job.error_code:
            return None
        return {
            "code": job.error_code,
            "http_status": job.error_http_status,
            "message": job.error_message,
            "severity": job.error_severity,
        }

    @extend_schema_field(_COST_USD)
    def get_cost_usd(self, step: PipelineStep) -> str:
        return f"{step.job.cost_usd if step.job else Decimal(0):.6f}"


class PipelineRowSerializer(serializers.ModelSerializer):
    """A pipeline in the list; ``cost_usd`` is annotated by the selector."""

    tags = serializers.ListField(child=serializers.CharField(), read_only=True)

    cost_usd = serializers.DecimalField(
        max_digits=16,
        decimal_places=6,
        coerce_to_string=True,
        help_text="What its steps' jobs cost so far (their ledger rows).",
    )

    class Meta:
        model = Pipeline
        fields = [
            "id",
            "name",
            "status",
            "step_count",
            "tags",
            "deadline",
            "created_at",
            "finished_at",
            "cost_usd",
        ]


class PipelineOutputSerializer(PipelineRowSerializer):
    """A pipeline with every step; ``context["steps"]`` holds them (pipeline_steps)."""

    cost_usd = serializers.SerializerMethodField()  # type: ignore[assignment]
    steps = serializers.SerializerMethodField()

    class Meta(PipelineRowSerializer.Meta):
        fields = [*PipelineRowSerializer.Meta.fields, "steps"]

    @extend_schema_field(_COST_USD)
    def get_cost_usd(self, pipeline: Pipeline) -> str:
        total = sum((s.job.cost_usd for s in self.context["steps"] if s.job), Decimal(0))
        return f"{total:.6f}"

    @extend_schema_field(PipelineStepSerializer(many=True))
    def get_steps(self, pipeline: Pipeline) -> list:
        context = {"pipeline_status": pipeline.status}
        return list(PipelineStepSerializer(self.context["steps"], many=True, context=context).data)


PIPELINES = RunResource(
    "pipelines",
    "pipeline",
    ("No such pipeline.", "pipeline_not_found"),
    pipeline_get_for_user,
    "pipelines:pipeline-detail",
    context=lambda pipeline: {"steps": pipeline_steps(pipeline=pipeline)},
)


def _submit(
    *, user: User, data: Any, idempotency_key: str | None, api_key_id: int | None
) -> tuple[Pipeline, bool]:
    # A pipeline takes no Idempotency-Key: each submit creates one.
    return pipeline_create(user=user, data=data, api_key_id=api_key_id), True


class PipelineListCreateApi(RunListCreateApi):
    resource = PIPELINES
    submit = RunSubmit(
        _submit,
        PipelineSubmitSerializer,
        SUBMIT_EXAMPLE,
        OpenApiResponse(
            PipelineSubmittedSerializer,
            description="Accepted: every step valid, the first step's job queued.",
        ),
        summary="Submit a pipeline of steps run one after the other",
        invalid=_SUBMIT_400,
        descriptions={
            400: (
                "The request is invalid. `invalid_steps`: detail.indexes lists every "
                "bad step, detail.errors describes each ({index, code, message, field}) "
                "with the code a job would get; nothing was saved."
            ),
        },
        idempotent=False,
    )
    listing = RunList(
        pipeline_list_for_user, PipelineRowSerializer, what="pipelines", feature=False, tags=False
    )


class PipelineDetailApi(RunDetailApi):
    resource = PIPELINES
    summary = "A pipeline and every step with its job's status and output"
    serializer = PipelineOutputSerializer


class PipelineCancelApi(RunCancelApi):
    resource = PIPELINES
    summary = "Cancel a running or failed pipeline"
    serializer = PipelineOutputSerializer
    permission = "pipelines.cancel_pipeline"

    def cancel(self, pipeline: Pipeline) -> Pipeline:
        return pipeline_cancel(pipeline=pipeline)
