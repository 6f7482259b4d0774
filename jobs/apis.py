"""Thin DRF views: validate, call a service or selector, serialize."""

import uuid
from typing import cast

from django.contrib.auth.models import User
from django.urls import reverse
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.models import LlmJob
from jobs.selectors import job_get_for_user, job_list_for_user
from jobs.services import job_cancel, job_submit
from llmops.errors import NotFound
from llmops.throttles import SubmitThrottle


def _parse_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise NotFound("No such job.", code="job_not_found") from exc


class JobOutputSerializer(serializers.ModelSerializer):
    output = serializers.SerializerMethodField()
    usage = serializers.SerializerMethodField()
    cost_usd = serializers.DecimalField(max_digits=16, decimal_places=6, coerce_to_string=True)
    error = serializers.SerializerMethodField()
    duration_ms = serializers.IntegerField(read_only=True)

    class Meta:
        model = LlmJob
        fields = [
            "id",
            "status",
            "feature",
            "model",
            "concurrency_key",
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

    def get_output(self, job: LlmJob) -> dict | None:
        if job.output_text is None:
            return None
        return {"text": job.output_text, "stop_reason": job.stop_reason or None}

    def get_usage(self, job: LlmJob) -> dict | None:
        if job.input_tokens is None:
            return None
        return {
            "input_tokens": job.input_tokens,
            "output_tokens": job.output_tokens,
            "cache_creation_input_tokens": job.cache_creation_input_tokens,
            "cache_read_input_tokens": job.cache_read_input_tokens,
        }

    def get_error(self, job: LlmJob) -> dict | None:
        if not job.error_code:
            return None
        return {
            "code": job.error_code,
            "http_status": job.error_http_status,
            "message": job.error_message,
            "severity": job.error_severity,
        }


class JobListCreateApi(APIView):
    throttle_classes = [SubmitThrottle]  # POST only: the list is never throttled

    class Pagination(PageNumberPagination):
        page_size_query_param = "page_size"
        max_page_size = 200

    def post(self, request: Request) -> Response:
        job, _created = job_submit(
            user=cast(User, request.user),
            data=request.data,
            idempotency_key=request.headers.get("Idempotency-Key"),
        )
        status_url = reverse("jobs:job-detail", kwargs={"job_id": job.id})
        return Response(
            {"id": str(job.id), "status": job.status, "status_url": status_url},
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": request.build_absolute_uri(status_url)},
        )

    def get(self, request: Request) -> Response:
        jobs = job_list_for_user(
            user=cast(User, request.user),
            status=request.query_params.get("status"),
            feature=request.query_params.get("feature"),
        )
        paginator = self.Pagination()
        page = paginator.paginate_queryset(jobs, request, view=self)
        return paginator.get_paginated_response(JobOutputSerializer(page, many=True).data)


class JobDetailApi(APIView):
    def get(self, request: Request, job_id: str) -> Response:
        job = job_get_for_user(user=cast(User, request.user), job_id=_parse_id(job_id))
        return Response(JobOutputSerializer(job).data)


class JobCancelApi(APIView):
    def post(self, request: Request, job_id: str) -> Response:
        job = job_get_for_user(user=cast(User, request.user), job_id=_parse_id(job_id))
        job = job_cancel(job=job)
        return Response(JobOutputSerializer(job).data)
