"""Thin DRF views of /api/v1/batches/: validate, call a service or selector, serialize."""

from typing import Any

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
from api.run_views import (
    RunCancelApi,
    RunDetailApi,
    RunList,
    RunListCreateApi,
    RunResource,
    RunSubmit,
)
from api.schema import error_headers, errors
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
from jobs.models import LlmJob
from jobs.representation import JobOutputSerializer
from keys.scopes import JOBS_READ

BATCHES = RunResource(
    "batches",
    "batch",
    ("No such batch.", "batch_not_found"),
    batch_get_for_user,
    "batches:batch-detail",
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


class BatchListCreateApi(RunListCreateApi):
    parser_classes = [BatchJSONParser]
    resource = BATCHES
    submit = RunSubmit(
        batch_submit,
        BatchSubmitSerializer,
        SUBMIT_EXAMPLE,
        OpenApiResponse(
            BatchSubmittedSerializer,
            description=(
                "Accepted: every item valid, its jobs queued (or the first batch of a "
                "repeated Idempotency-Key)."
            ),
        ),
        summary="Submit a batch of jobs",
        invalid=_SUBMIT_400,
        descriptions={
            413: "The body is larger than LLM_BATCH_MAX_REQUEST_BYTES.",
            400: (
                "The request is invalid. `invalid_items`: detail.indexes lists every "
                "bad item, detail.errors describes the first 100 ({index, code, "
                "message, field}); nothing was saved."
            ),
        },
    )
    listing = RunList(batch_list_for_user, BatchRowSerializer, what="batches")


class BatchDetailApi(RunDetailApi):
    resource = BATCHES
    summary = "A batch: status, counters (items) and cost"
    serializer = BatchOutputSerializer


class BatchJobsApi(APIView):
    required_scopes = {"GET": JOBS_READ}
    pagination_class = Pagination

    @extend_schema(
        operation_id="batches_jobs",
        summary="A batch's jobs, in the order of their first item",
        parameters=[
            BATCHES.path_parameter,
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
        batch = BATCHES.lookup(request, batch_id)
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
    submitter_may_read = True  # a key without jobs:read reads the batches it submitted
    pagination_class = Pagination

    @extend_schema(
        operation_id="batches_embeddings",
        summary="An embedding batch's vectors, item by item in the submitted order",
        parameters=[BATCHES.path_parameter, *error_headers()],
        responses={
            200: BatchEmbeddingItemSerializer(many=True),
            **errors(
                {400: ["not_an_embedding_batch"], 404: ["batch_not_found"]},
                descriptions={404: "No such batch (or not yours), or a page past the last."},
            ),
        },
    )
    def get(self, request: Request, batch_id: str) -> Response:
        batch = BATCHES.lookup(request, batch_id)
        items = batch_embedding_items(batch=batch)
        return paginated_response(
            request,
            self,
            items,
            BatchEmbeddingItemSerializer,
            context_for_page=lambda page: {"vectors": batch_item_vectors(page)},
        )


class BatchCancelApi(RunCancelApi):
    resource = BATCHES
    summary = "Cancel a batch: its jobs not yet running are cancelled"
    serializer = BatchOutputSerializer
    cancelled = (
        "Cancelled (or already stopped): waiting jobs are being cancelled in the "
        "background; jobs already running end on their own."
    )
    permission = "batches.cancel_batch"

    def cancel(self, batch: Batch) -> Batch:
        return batch_cancel(batch=batch)
