"""Thin DRF views of /api/v1/jobs/: the shared run views (api/run_views.py) with the jobs'
services, selectors and serializers."""

from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse
from rest_framework.response import Response

from api.errors import Conflict
from api.run_views import (
    RunCancelApi,
    RunDetailApi,
    RunList,
    RunListCreateApi,
    RunResource,
    RunSubmit,
)
from jobs.api_schema import SUBMIT_EXAMPLE, JobSubmitSerializer, JobSubmittedSerializer
from jobs.models import LlmJob
from jobs.representation import JobOutputSerializer
from jobs.selectors import job_get_for_user, job_list_for_user, job_wait_while_running
from jobs.services import job_cancel, job_submit

JOBS = RunResource(
    "jobs", "job", ("No such job.", "job_not_found"), job_get_for_user, "jobs:job-detail"
)


class JobListCreateApi(RunListCreateApi):
    resource = JOBS
    submit = RunSubmit(
        job_submit,
        JobSubmitSerializer,
        SUBMIT_EXAMPLE,
        OpenApiResponse(
            JobSubmittedSerializer,
            description="Accepted and queued (or the first job of a repeated Idempotency-Key).",
        ),
        summary="Submit a job",
        invalid=[
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
            "invalid_callback_url",
            "invalid_idempotency_key",
        ],
    )
    listing = RunList(job_list_for_user, JobOutputSerializer, what="jobs")


class JobDetailApi(RunDetailApi):
    resource = JOBS
    summary = "One of the caller's jobs"
    serializer = JobOutputSerializer

    def body(self, job: LlmJob) -> Any:
        return JobOutputSerializer(job, context={"partial": True}).data


class JobCancelApi(RunCancelApi):
    resource = JOBS
    summary = "Cancel a job: waiting, or running (its stream is closed)"
    description = (
        "A queued or retrying job is cancelled at once (200). A running job's "
        "worker closes its stream within about two seconds and books what streamed: the "
        "answer waits up to `LLM_CANCEL_WAIT_SECONDS` for that (200, `cancelled`, the partial "
        "output kept), else answers 202 with the job still `running`, to be polled."
    )
    serializer = JobOutputSerializer
    accepted = {202: JobOutputSerializer}

    def cancel(self, job: LlmJob) -> LlmJob:
        job = job_cancel(job=job, running=True)
        return job_wait_while_running(job=job, seconds=settings.LLM_CANCEL_WAIT_SECONDS)

    def answer(self, job: LlmJob) -> Response:
        job = self.cancel(job)
        if job.status == LlmJob.Status.RUNNING:
            return Response(self.body(job), status=202)
        if job.status != LlmJob.Status.CANCELLED:
            raise Conflict(
                f"The job ended {job.status} before its cancel reached it.",
                code="not_cancellable",
                detail={"status": job.status},
            )
        return Response(self.body(job))
