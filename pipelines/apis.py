"""Thin DRF views of /api/v1/pipelines/: validate, call a service or selector, serialize."""

import uuid
from typing import Any, cast

from django.contrib.auth.models import User
from django.urls import reverse
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmops.errors import NotFound
from llmops.throttles import SubmitThrottle
from pipelines.models import Pipeline, PipelineStep
from pipelines.selectors import pipeline_get_for_user, pipeline_list_for_user, pipeline_steps
from pipelines.services import pipeline_cancel, pipeline_create


def _parse_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise NotFound("No such pipeline.", code="pipeline_not_found") from exc


class PipelineStepSerializer(serializers.Serializer):
    """A step: its job's fields once it has one (as in GET /api/v1/jobs/<id>/)."""

    index = serializers.IntegerField()
    status = serializers.SerializerMethodField()
    job_id = serializers.UUIDField(allow_null=True)
    feature = serializers.SerializerMethodField()
    model = serializers.SerializerMethodField()
    attempts = serializers.SerializerMethodField()
    started_at = serializers.DateTimeField(source="job.started_at", default=None)
    completed_at = serializers.DateTimeField(source="job.completed_at", default=None)
    output = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    cost_usd = serializers.SerializerMethodField()

    def get_status(self, step: PipelineStep) -> str:
        return step.status_in(self.context["pipeline_status"])

    def get_feature(self, step: PipelineStep) -> str:
        return step.job.feature if step.job else step.request["feature"]

    def get_model(self, step: PipelineStep) -> str:
        # The job's: a requeue from the DLQ may have moved it to another model.
        return step.job.model if step.job else step.request["model"]

    def get_attempts(self, step: PipelineStep) -> int:
        return step.job.attempts if step.job else 0

    def get_output(self, step: PipelineStep) -> dict | None:
        job = step.job
        if job is None or job.output_text is None:
            return None
        return {"text": job.output_text, "stop_reason": job.stop_reason or None}

    def get_error(self, step: PipelineStep) -> dict | None:
        job = step.job
        if job is None:
            if not step.error_code:
                return None
            # Refused when it was to start: no job, no provider call.
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

    def get_cost_usd(self, step: PipelineStep) -> str:
        return f"{step.job.cost_usd:.6f}" if step.job else "0.000000"


class PipelineSummarySerializer(serializers.ModelSerializer):
    cost_usd = serializers.DecimalField(max_digits=16, decimal_places=6, coerce_to_string=True)

    class Meta:
        model = Pipeline
        fields = ["id", "name", "status", "step_count", "created_at", "finished_at", "cost_usd"]


def _pipeline_detail(pipeline: Pipeline) -> dict[str, Any]:
    steps = pipeline_steps(pipeline=pipeline)
    pipeline.cost_usd = sum((s.job.cost_usd for s in steps if s.job), start=0)  # type: ignore[attr-defined]
    data = dict(PipelineSummarySerializer(pipeline).data)
    context = {"pipeline_status": pipeline.status}
    data["steps"] = PipelineStepSerializer(steps, many=True, context=context).data
    return data


class PipelineListCreateApi(APIView):
    # A pipeline is a submit: it shares the per-user submit rate with jobs and batches (POST
    # only; the list is never throttled).
    throttle_classes = [SubmitThrottle]

    class Pagination(PageNumberPagination):
        page_size_query_param = "page_size"
        max_page_size = 200

    def post(self, request: Request) -> Response:
        pipeline = pipeline_create(user=cast(User, request.user), data=request.data)
        status_url = reverse("pipelines:pipeline-detail", kwargs={"pipeline_id": pipeline.id})
        return Response(
            {"id": str(pipeline.id), "status": pipeline.status, "status_url": status_url},
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": request.build_absolute_uri(status_url)},
        )

    def get(self, request: Request) -> Response:
        pipelines = pipeline_list_for_user(
            user=cast(User, request.user), status=request.query_params.get("status")
        )
        paginator = self.Pagination()
        page = paginator.paginate_queryset(pipelines, request, view=self)
        return paginator.get_paginated_response(PipelineSummarySerializer(page, many=True).data)


class PipelineDetailApi(APIView):
    def get(self, request: Request, pipeline_id: str) -> Response:
        pipeline = pipeline_get_for_user(
            user=cast(User, request.user), pipeline_id=_parse_id(pipeline_id)
        )
        return Response(_pipeline_detail(pipeline))


class PipelineCancelApi(APIView):
    def post(self, request: Request, pipeline_id: str) -> Response:
        pipeline = pipeline_get_for_user(
            user=cast(User, request.user), pipeline_id=_parse_id(pipeline_id)
        )
        return Response(_pipeline_detail(pipeline_cancel(pipeline=pipeline)))
