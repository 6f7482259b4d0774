"""Thin DRF views of /api/v1/batches/: validate, call a service or selector, serialize."""

import uuid
from typing import Any, cast

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

from api.pagination import Pagination, paginated_response
from api.path_ids import uuid_or_not_found
from api.schema import IDEMPOTENCY_KEY, PAGE_NOT_FOUND, error_headers, errors, location_header
from api.submit_throttles import SubmitThrottle
from api.submits import accepted_response, idempotency_key
from batches.api_schema import SUBMIT_EXAMPLE, BatchSubmitSerializer, BatchSubmittedSerializer
from batches.models import Batch
from batches.parsers import BatchJSONParser
from batches.selectors import (
    batch_embedding_items,
    batch_get_for_user,
    batch_item_indexes,
    batch_item_vectors,
    batch_jobs,
    batch_list_for_user,
)
from batches.serializers import BatchOutputSerializer, BatchRowSerializer
from batches.services import batch_cancel, batch_submit
from jobs.apis import JobOutputSerializer
from jobs.models import LlmJob
from keys.permissions import request_api_key_id
from keys.scopes import JOBS_READ, JOBS_WRITE

BATCH_ID = OpenApiParameter(
    "batch_id",
    OpenApiTypes.UUID,
    OpenApiParameter.PATH,
    description="The batch's id; any other value, or another user's batch, answers 404.",
)

_SUBMIT_400 = [
    "invalid_body",
    "unknown_field",
    "invalid_kind",
    "invalid_model",
    "invalid_input",
    "invalid_dimensions",
    "invalid_name",
    "invalid_allow_failures",
    "invalid_callback_url",
    "invalid_deadline",
    "invalid_tags",
    "invalid_items",
    "too_many_items",
    "invalid_feature",
    "unknown_model",
    "invalid_idempotency_key",
]


def _parse_id(value: str) -> uuid.UUID:
    return uuid_or_not_found(value, message="No such batch.", code="batch_not_found")


class BatchJobSerializer(JobOutputSerializer):
    """A job of the batch, as the jobs API shows it, with the items it runs."""

    items = serializers.SerializerMethodField()

    class Meta(JobOutputSerializer.Meta):
        fields = [*JobOutputSerializer.Meta.fields, "items"]

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_items(self, job: LlmJob) -> list[int]:
        """The indexes of the batch's items this job runs (several for identical items)."""
        indexes: dict[Any, list[int]] = self.context["indexes"]
        return indexes.get(job.id, [])


class BatchListCreateApi(APIView):
    required_scopes = {"GET": JOBS_READ, "POST": JOBS_WRITE}
    parser_classes = [BatchJSONParser]
    throttle_classes = [SubmitThrottle]  # POST only (one batch counts as one submit)
    pagination_class = Pagination

    @extend_schema(
        operation_id="batches_submit",
        summary="Submit a batch of jobs",
        request=BatchSubmitSerializer,
        examples=[SUBMIT_EXAMPLE],
        parameters=[
            IDEMPOTENCY_KEY,
            location_header("The batch's status URL."),
            *error_headers(),
        ],
        responses={
            202: OpenApiResponse(
                BatchSubmittedSerializer,
                description=(
                    "Accepted: every item valid, its jobs queued (or the first batch of a "
                    "repeated Idempotency-Key)."
                ),
            ),
            **errors(
                {
                    400: _SUBMIT_400,
                    409: ["idempotency_conflict"],
                    413: [],
                    415: [],
                    429: ["budget_exceeded"],
                },
                descriptions={
                    413: "The body is larger than LLM_BATCH_MAX_REQUEST_BYTES.",
                    400: (
                        "The request is invalid. `invalid_items`: detail.indexes lists every "
                        "bad item, detail.errors describes the first 100 ({index, code, "
                        "message, field}); nothing was saved."
                    ),
                },
            ),
        },
    )
    def post(self, request: Request) -> Response:
        batch, _created = batch_submit(
            user=cast(User, request.user),
            data=request.data,
            idempotency_key=idempotency_key(request),
            api_key_id=request_api_key_id(request),
        )
        return accepted_response(request, batch, status_url_name="batches:batch-detail")

    @extend_schema(
        operation_id="batches_list",
        summary="The caller's batches, newest first",
        parameters=[
            OpenApiParameter("status", enum=Batch.Status.values),
            OpenApiParameter("tag", str, description="Only batches carrying this tag."),
            *error_headers(),
        ],
        responses={
            200: BatchRowSerializer(many=True),
            **errors({400: ["invalid_filter"], 404: []}, descriptions=PAGE_NOT_FOUND),
        },
    )
    def get(self, request: Request) -> Response:
        batches = batch_list_for_user(
            user=cast(User, request.user),
            status=request.query_params.get("status"),
            tag=request.query_params.get("tag"),
        )
        return paginated_response(request, self, batches, BatchRowSerializer)


class BatchDetailApi(APIView):
    required_scopes = {"GET": JOBS_READ}

    @extend_schema(
        operation_id="batches_retrieve",
        summary="A batch: status, counters (items) and cost",
        parameters=[BATCH_ID, *error_headers()],
        responses={200: BatchOutputSerializer, **errors({404: ["batch_not_found"]})},
    )
    def get(self, request: Request, batch_id: str) -> Response:
        batch = batch_get_for_user(user=cast(User, request.user), batch_id=_parse_id(batch_id))
        return Response(BatchOutputSerializer(batch).data)


class BatchJobsApi(APIView):
    required_scopes = {"GET": JOBS_READ}
    pagination_class = Pagination

    @extend_schema(
        operation_id="batches_jobs",
        summary="A batch's jobs, in the order of their first item",
        parameters=[
            BATCH_ID,
            OpenApiParameter("status", enum=LlmJob.Status.values),
            *error_headers(),
        ],
        responses={
            200: BatchJobSerializer(many=True),
            **errors(
                {400: ["invalid_filter"], 404: ["batch_not_found"]},
                descriptions={404: "No such batch (or not yours), or a page past the last."},
            ),
        },
    )
    def get(self, request: Request, batch_id: str) -> Response:
        batch = batch_get_for_user(user=cast(User, request.user), batch_id=_parse_id(batch_id))
        jobs = batch_jobs(batch=batch, status=request.query_params.get("status"))
        return paginated_response(
            request,
            self,
            jobs,
            BatchJobSerializer,
            context_for_page=lambda page: {
                "indexes": batch_item_indexes(batch=batch, job_ids=[job.id for job in page])
            },
        )


class BatchEmbeddingItemSerializer(serializers.Serializer):
    """An item of an embedding batch: its text's vector once its job completed."""

    index = serializers.IntegerField()
    status = serializers.CharField(source="job.status", help_text="Its job's status.")
    job = serializers.UUIDField(source="job.id")
    metadata = serializers.DictField(allow_null=True)
    embedding = serializers.SerializerMethodField()

    @extend_schema_field(serializers.ListField(child=serializers.FloatField(), allow_null=True))
    def get_embedding(self, item: Any) -> list[float] | None:
        vectors: dict[Any, list[float]] = self.context["vectors"]
        return vectors.get((item.job_id, item.position))


class BatchEmbeddingsApi(APIView):
    required_scopes = {"GET": JOBS_READ}
    pagination_class = Pagination

    @extend_schema(
        operation_id="batches_embeddings",
        summary="An embedding batch's vectors, item by item in the submitted order",
        parameters=[BATCH_ID, *error_headers()],
        responses={
            200: BatchEmbeddingItemSerializer(many=True),
            **errors(
                {400: ["not_an_embedding_batch"], 404: ["batch_not_found"]},
                descriptions={404: "No such batch (or not yours), or a page past the last."},
            ),
        },
    )
    def get(self, request: Request, batch_id: str) -> Response:
        batch = batch_get_for_user(user=cast(User, request.user), batch_id=_parse_id(batch_id))
        items = batch_embedding_items(batch=batch)
        return paginated_response(
            request,
            self,
            items,
            BatchEmbeddingItemSerializer,
            context_for_page=lambda page: {"vectors": batch_item_vectors(page)},
        )


class BatchCancelApi(APIView):
    required_scopes = {"POST": JOBS_WRITE}

    @extend_schema(
        operation_id="batches_cancel",
        summary="Cancel a batch: its jobs not yet running are cancelled",
        request=None,
        parameters=[BATCH_ID, *error_headers()],
        responses={
            200: OpenApiResponse(
                BatchOutputSerializer,
                description=(
                    "Cancelled (or already stopped): waiting jobs are being cancelled in the "
                    "background; jobs already running end on their own."
                ),
            ),
            **errors({404: ["batch_not_found"], 409: ["not_cancellable"]}),
        },
    )
    def post(self, request: Request, batch_id: str) -> Response:
        batch = batch_get_for_user(
            user=cast(User, request.user),
            batch_id=_parse_id(batch_id),
            permission="batches.cancel_batch",
        )
        return Response(BatchOutputSerializer(batch_cancel(batch=batch)).data)
