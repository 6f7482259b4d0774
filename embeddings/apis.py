"""Thin DRF views of /api/v1/embeddings/: an embedding job submitted and shown. The job is an
ordinary ``LlmJob`` (kind ``embedding``): the jobs API shows it too."""

import uuid
from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema_field,
)

from api.errors import NotFound
from api.run_views import RunDetailApi, RunResource, RunSubmit, RunSubmitApi
from embeddings.api_schema import (
    SUBMIT_EXAMPLE,
    EmbeddingOutputSerializer,
    EmbeddingSubmitSerializer,
)
from embeddings.validation import validate_embedding_request
from jobs.api_schema import JobSubmittedSerializer
from jobs.models import LlmJob
from jobs.representation import JobOutputSerializer
from jobs.selectors import job_get_for_user, job_output
from jobs.services import job_submit

EMBEDDING_ID = OpenApiParameter(
    "embedding_id",
    OpenApiTypes.UUID,
    OpenApiParameter.PATH,
    description="The embedding job's id; any other value, another user's job or a chat job "
    "answers 404.",
)


class EmbeddingSerializer(JobOutputSerializer):
    """An embedding job as the jobs API shows it, ``output`` with its vectors."""

    @extend_schema_field(EmbeddingOutputSerializer(allow_null=True))
    def get_output(self, job: LlmJob) -> dict | None:
        return job_output(job, partial=True)


def _embedding_job(*, user: User, embedding_id: uuid.UUID) -> LlmJob:
    try:
        job = job_get_for_user(user=user, job_id=embedding_id)
    except NotFound:
        job = None
    if job is None or not job.is_embedding:
        raise NotFound("No such embedding job.", code="embedding_not_found")
    return job


def _submit(
    *, user: User, data: Any, idempotency_key: str | None, api_key_id: int | None
) -> tuple[LlmJob, bool]:
    return job_submit(
        user=user,
        request=validate_embedding_request(data),
        idempotency_key=idempotency_key,
        api_key_id=api_key_id,
    )


EMBEDDINGS = RunResource(
    "embeddings",
    "job",
    ("No such embedding job.", "embedding_not_found"),
    _embedding_job,
    "embeddings:embedding-detail",
    path_id=EMBEDDING_ID,
)


class EmbeddingCreateApi(RunSubmitApi):
    resource = EMBEDDINGS
    submit = RunSubmit(
        _submit,
        EmbeddingSubmitSerializer,
        SUBMIT_EXAMPLE,
        OpenApiResponse(JobSubmittedSerializer, description="Accepted and queued."),
        summary="Embed up to 2,048 texts (a job of kind embedding)",
        invalid=[
            "invalid_body",
            "unknown_field",
            "invalid_feature",
            "unknown_model",
            "invalid_model",
            "provider_disabled",
            "invalid_input",
            "too_many_inputs",
            "invalid_dimensions",
            "invalid_metadata",
            "invalid_idempotency_key",
        ],
    )


class EmbeddingDetailApi(RunDetailApi):
    resource = EMBEDDINGS
    summary = "One embedding job: its status and, once completed, its vectors"
    serializer = EmbeddingSerializer
