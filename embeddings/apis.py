"""Thin DRF views of /api/v1/embeddings/: an embedding job submitted and shown. The job is an
ordinary ``LlmJob`` (kind ``embedding``): the jobs API shows it too."""

import uuid
from typing import cast

from django.contrib.auth.models import User
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.errors import NotFound
from api.path_ids import uuid_or_not_found
from api.schema import IDEMPOTENCY_KEY, error_headers, errors, location_header
from api.submit_throttles import SubmitThrottle
from api.submits import accepted_response, idempotency_key
from embeddings.api_schema import (
    SUBMIT_EXAMPLE,
    EmbeddingOutputSerializer,
    EmbeddingSubmitSerializer,
)
from embeddings.validation import validate_embedding_request
from jobs.api_schema import JobSubmittedSerializer
from jobs.apis import JobOutputSerializer
from jobs.models import LlmJob
from jobs.selectors import job_get_for_user, job_output
from jobs.services import job_submit
from keys.permissions import request_api_key_id
from keys.scopes import JOBS_READ, JOBS_WRITE

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


class EmbeddingCreateApi(APIView):
    required_scopes = {"POST": JOBS_WRITE}
    throttle_classes = [SubmitThrottle]

    @extend_schema(
        operation_id="embeddings_submit",
        summary="Embed up to 2,048 texts (a job of kind embedding)",
        request=EmbeddingSubmitSerializer,
        examples=[SUBMIT_EXAMPLE],
        parameters=[IDEMPOTENCY_KEY, location_header("The job's status URL."), *error_headers()],
        responses={
            202: OpenApiResponse(JobSubmittedSerializer, description="Accepted and queued."),
            **errors(
                {
                    400: [
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
            request=validate_embedding_request(request.data),
            idempotency_key=idempotency_key(request),
            api_key_id=request_api_key_id(request),
        )
        return accepted_response(request, job, status_url_name="embeddings:embedding-detail")


class EmbeddingDetailApi(APIView):
    required_scopes = {"GET": JOBS_READ}

    @extend_schema(
        operation_id="embeddings_retrieve",
        summary="One embedding job: its status and, once completed, its vectors",
        parameters=[EMBEDDING_ID, *error_headers()],
        responses={200: EmbeddingSerializer, **errors({404: ["embedding_not_found"]})},
    )
    def get(self, request: Request, embedding_id: str) -> Response:
        job_id = uuid_or_not_found(
            embedding_id, message="No such embedding job.", code="embedding_not_found"
        )
        job = _embedding_job(cast(User, request.user), job_id)
        return Response(EmbeddingSerializer(job).data)


def _embedding_job(user: User, job_id: uuid.UUID) -> LlmJob:
    try:
        job = job_get_for_user(user=user, job_id=job_id)
    except NotFound:
        job = None
    if job is None or not job.is_embedding:
        raise NotFound("No such embedding job.", code="embedding_not_found")
    return job
