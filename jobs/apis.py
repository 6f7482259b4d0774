"""Thin DRF views: validate, call a service or selector, serialize."""

import uuid
from typing import cast

from django.conf import settings
from django.contrib.auth.models import User
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.errors import Conflict
from api.pagination import Pagination, paginated_response
from api.path_ids import uuid_or_not_found
from api.schema import IDEMPOTENCY_KEY, PAGE_NOT_FOUND, error_headers, errors, location_header
from api.submit_throttles import SubmitThrottle
from api.submits import accepted_response, idempotency_key
from jobs.api_schema import (
    SUBMIT_EXAMPLE,
    JobErrorSerializer,
    JobOutputTextSerializer,
    JobSubmitSerializer,
    JobSubmittedSerializer,
    JobUsageSerializer,
)
from jobs.models import LlmJob
from jobs.selectors import (
    job_get_for_user,
    job_list_for_user,
    job_output,
    job_wait_while_running,
)
from jobs.services import job_cancel, job_submit
from keys.permissions import request_api_key_id
from keys.scopes import JOBS_READ, JOBS_WRITE

JOB_ID = OpenApiParameter(
    "job_id",
    OpenApiTypes.UUID,
    OpenApiParameter.PATH,
    description="The job's id; any other value, or another user's job, answers 404.",
)


def _parse_id(value: str) -> uuid.UUID:
    return uuid_or_not_found(value, message="No such job.", code="job_not_found")


class JobOutputSerializer(serializers.ModelSerializer):
    output = serializers.SerializerMethodField()
    usage = serializers.SerializerMethodField()
    cost_usd = serializers.DecimalField(max_digits=16, decimal_places=6, coerce_to_string=True)
    error = serializers.SerializerMethodField()
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    deadline = serializers.DateTimeField(read_only=True, allow_null=True)
    duration_ms = serializers.IntegerField(read_only=True, allow_null=True)
    provider_batch = serializers.SerializerMethodField(
        help_text="The provider's id of the message batch its last deferred attempt went in."
    )
    served_by = serializers.SerializerMethodField(
        help_text="The model that answered: ``model``, or a fallback of the feature's policy "
        "(null until the job completes)."
    )

    class Meta:
        model = LlmJob
        fields = [
            "id",
            "status",
            "feature",
            "model",
            "served_by",
            "kind",
            "mode",
            "provider_batch",
            "concurrency_key",
            "tags",
            "deadline",
            "attempts",
            "created_at",
            "started_at",
            "completed_at",
            "duration_ms",
            "next_attempt_at",
            "output",
            "usage",
            "cost_usd",
            "error",
        ]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_provider_batch(self, job: LlmJob) -> str | None:
        if job.provider_batch_id is None:
            return None
        return job.provider_batch.provider_batch_id if job.provider_batch else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_served_by(self, job: LlmJob) -> str | None:
        return job.served_by or None

    @extend_schema_field(JobOutputTextSerializer(allow_null=True))
    def get_output(self, job: LlmJob) -> dict | None:
        return job_output(job, partial=self.context.get("partial", False))

    @extend_schema_field(JobUsageSerializer(allow_null=True))
    def get_usage(self, job: LlmJob) -> dict | None:
        if job.input_tokens is None:
            return None
        return {
            "input_tokens": job.input_tokens,
            "output_tokens": job.output_tokens,
            "cache_creation_input_tokens": job.cache_creation_input_tokens,
            "cache_read_input_tokens": job.cache_read_input_tokens,
        }

    @extend_schema_field(JobErrorSerializer(allow_null=True))
    def get_error(self, job: LlmJob) -> dict | None:
        if not job.error_code:
            return None
        error = {
            "code": job.error_code,
            "http_status": job.error_http_status,
            "message": job.error_message,
            "severity": job.error_severity,
        }
        if job.deadline_stopped:
            error["deadline_stopped"] = True
        return error


class JobListCreateApi(APIView):
    required_scopes = {"GET": JOBS_READ, "POST": JOBS_WRITE}
    throttle_classes = [SubmitThrottle]  # POST only: the list is never throttled

    pagination_class = Pagination

    @extend_schema(
        operation_id="jobs_submit",
        summary="Submit a job",
        request=JobSubmitSerializer,
        examples=[SUBMIT_EXAMPLE],
        parameters=[
            IDEMPOTENCY_KEY,
            location_header("The job's status URL."),
            *error_headers(),
        ],
        responses={
            202: OpenApiResponse(
                JobSubmittedSerializer,
                description="Accepted and queued (or the first job of a repeated Idempotency-Key).",
            ),
            **errors(
                {
                    400: [
                        "invalid_body",
                        "unknown_field",
                        "invalid_feature",
                        "unknown_model",
                        "invalid_messages",
                        "invalid_max_tokens",
                        "invalid_system",
                        "invalid_temperature",
                        "invalid_metadata",
                        "invalid_concurrency_key",
                        "invalid_deadline",
                        "invalid_tags",
                        "invalid_idempotency_key",
                    ],
                    409: ["idempotency_conflict"],
                    413: [],
                    415: [],
                    429: ["budget_exceeded"],
                }
            ),
        },
    )
    def post(self, request: Request) -> Response:
        job, _created = job_submit(
            user=cast(User, request.user),
            data=request.data,
            idempotency_key=idempotency_key(request),
            api_key_id=request_api_key_id(request),
        )
        return accepted_response(request, job, status_url_name="jobs:job-detail")

    @extend_schema(
        operation_id="jobs_list",
        summary="The caller's jobs, newest first",
        parameters=[
            OpenApiParameter("status", enum=LlmJob.Status.values),
            OpenApiParameter("feature", str),
            OpenApiParameter("tag", str, description="Only jobs carrying this tag."),
            *error_headers(),
        ],
        responses={
            200: JobOutputSerializer(many=True),
            **errors({400: ["invalid_filter"], 404: []}, descriptions=PAGE_NOT_FOUND),
        },
    )
    def get(self, request: Request) -> Response:
        jobs = job_list_for_user(
            user=cast(User, request.user),
            status=request.query_params.get("status"),
            feature=request.query_params.get("feature"),
            tag=request.query_params.get("tag"),
        )
        return paginated_response(request, self, jobs, JobOutputSerializer)


class JobDetailApi(APIView):
    required_scopes = {"GET": JOBS_READ}

    @extend_schema(
        operation_id="jobs_retrieve",
        summary="One of the caller's jobs",
        parameters=[JOB_ID, *error_headers()],
        responses={200: JobOutputSerializer, **errors({404: ["job_not_found"]})},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = job_get_for_user(user=cast(User, request.user), job_id=_parse_id(job_id))
        return Response(JobOutputSerializer(job, context={"partial": True}).data)


class JobCancelApi(APIView):
    required_scopes = {"POST": JOBS_WRITE}

    @extend_schema(
        operation_id="jobs_cancel",
        summary="Cancel a job: waiting, or running (its stream is closed)",
        description="A queued or retrying job is cancelled at once (200). A running job's "
        "worker closes its stream within about two seconds and books what streamed: the "
        "answer waits up to `LLM_CANCEL_WAIT_SECONDS` for that (200, `cancelled`, the partial "
        "output kept), else answers 202 with the job still `running`, to be polled.",
        request=None,
        parameters=[JOB_ID, *error_headers()],
        responses={
            200: JobOutputSerializer,
            202: JobOutputSerializer,
            **errors({404: ["job_not_found"], 409: ["not_cancellable"]}),
        },
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = job_get_for_user(user=cast(User, request.user), job_id=_parse_id(job_id))
        job = job_cancel(job=job, running=True)
        job = job_wait_while_running(job=job, seconds=settings.LLM_CANCEL_WAIT_SECONDS)
        if job.status == LlmJob.Status.RUNNING:
            return Response(JobOutputSerializer(job).data, status=202)
        if job.status != LlmJob.Status.CANCELLED:
            raise Conflict(
                f"The job ended {job.status} before its cancel reached it.",
                code="not_cancellable",
                detail={"status": job.status},
            )
        return Response(JobOutputSerializer(job).data)
