"""Staff API for the dead-letter queue: the same services as the admin console."""

from typing import cast

from django.contrib.auth.models import User
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import BasePermission, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alerts.models import Severity
from api.errors import ApplicationError, NotFound, ValidationFailed
from api.pagination import paginated_response
from api.schema import error_headers, errors, page_responses
from dlq.models import FailureRecord
from dlq.selectors import FILTERS, failure_list
from dlq.services import failure_close, failure_requeue
from keys.permissions import HasScope
from keys.scopes import ADMIN


class FailureJobSerializer(serializers.Serializer):
    """The dead-lettered job, in short; its full state is at ``status_url``."""

    id = serializers.UUIDField()
    status = serializers.CharField()
    feature = serializers.CharField()
    model = serializers.CharField()
    attempts = serializers.IntegerField()
    cost_usd = serializers.DecimalField(max_digits=16, decimal_places=6, coerce_to_string=True)
    status_url = serializers.CharField()


class FailureOutputSerializer(serializers.ModelSerializer):
    job = serializers.SerializerMethodField()
    handled_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = FailureRecord
        fields = [
            "id",
            "severity",
            "reason_code",
            "retries_exhausted",
            "http_status",
            "error_type",
            "message",
            "request_id",
            "attempts",
            "state",
            "created_at",
            "handled_at",
            "handled_by",
            "comment",
            "requeued_model",
            "job",
        ]

    @extend_schema_field(FailureJobSerializer)
    def get_job(self, record: FailureRecord) -> dict:
        job = record.job
        return {
            "id": str(job.id),
            "status": job.status,
            "feature": job.feature,
            "model": job.model,
            "attempts": job.attempts,
            "cost_usd": f"{job.cost_usd:.6f}",
            "status_url": f"/api/v1/jobs/{job.id}/",
        }


def _permission_denied(action: str) -> ApplicationError:
    return ApplicationError(
        f"You do not have permission to {action} failures.",
        code="permission_denied",
        status_code=403,
    )


def _require(request: Request, perm: str, action: str) -> None:
    if not request.user.has_perm(f"dlq.{perm}"):
        raise _permission_denied(action)


def _get_record(failure_id: int) -> FailureRecord:
    record = FailureRecord.objects.select_related("job", "handled_by").filter(id=failure_id).first()
    if record is None:
        raise NotFound("No such failure.", code="failure_not_found")
    return record


class CanViewFailures(BasePermission):
    def has_permission(self, request, view):  # type: ignore[no-untyped-def]
        return request.user.has_perm("dlq.view_failurerecord")


def _action_responses(name: str, flag: str, meaning: str, invalid: list[str]) -> dict:
    """A failure action's answers: ``flag`` (``meaning``) with the failure as it then is, or
    its ``400`` codes ``invalid`` and what every action answers: staff only, the record by id,
    open records only."""
    result = inline_serializer(
        name=name,
        fields={
            flag: serializers.BooleanField(help_text=meaning),
            "failure": FailureOutputSerializer(),
        },
    )
    return {
        200: result,
        **errors(
            {
                400: invalid,
                403: ["permission_denied"],
                404: ["failure_not_found"],
                409: ["failure_not_open"],
                413: [],
                415: [],
            }
        ),
    }


class FailureListApi(APIView):
    required_scopes = {"GET": ADMIN}
    permission_classes = [HasScope, IsAdminUser, CanViewFailures]
    pagination_class = PageNumberPagination

    @extend_schema(
        operation_id="failures_list",
        summary="Dead-lettered jobs, newest first (staff with view permission)",
        parameters=[
            OpenApiParameter("state", enum=FailureRecord.State.values),
            OpenApiParameter("severity", enum=Severity.values),
            OpenApiParameter("reason_code", str),
            OpenApiParameter("feature", str, description="The job's feature."),
            OpenApiParameter("model", str, description="The job's model."),
            OpenApiParameter("http_status", int, description="The provider's HTTP status."),
            *error_headers(),
        ],
        responses=page_responses(
            FailureOutputSerializer, {400: ["invalid_filter"], 403: ["permission_denied"]}
        ),
    )
    def get(self, request: Request) -> Response:
        filters = {k: str(v) for k, v in request.query_params.items() if k in FILTERS}
        records = failure_list(filters=filters)
        return paginated_response(request, self, records, FailureOutputSerializer)


class FailureRequeueApi(APIView):
    required_scopes = {"POST": ADMIN}
    permission_classes = [HasScope, IsAdminUser]

    @extend_schema_serializer(component_name="FailureRequeue")
    class InputSerializer(serializers.Serializer):
        model = serializers.CharField(required=False, allow_blank=False, max_length=100)

    @extend_schema(
        operation_id="failures_requeue",
        summary="Requeue the failed job with a fresh retry budget, optionally on another model",
        request=InputSerializer,
        parameters=error_headers(),
        responses=_action_responses(
            "FailureRequeueResult",
            "requeued",
            "False when it was already requeued.",
            ["invalid_model", "unknown_model", "invalid_max_tokens"],
        ),
    )
    def post(self, request: Request, failure_id: int) -> Response:
        _require(request, "requeue_failurerecord", "requeue")
        data = _validated(self.InputSerializer, request.data)
        model = data.get("model")
        if model:
            _require(request, "requeue_other_model_failurerecord", "requeue on another model")
        record = _get_record(failure_id)
        moved = failure_requeue(record=record, by=cast(User, request.user), model=model)
        record = _get_record(failure_id)
        return Response({"requeued": moved, "failure": FailureOutputSerializer(record).data})


class FailureResolveApi(APIView):
    required_scopes = {"POST": ADMIN}
    permission_classes = [HasScope, IsAdminUser]

    @extend_schema_serializer(component_name="FailureResolve")
    class InputSerializer(serializers.Serializer):
        comment = serializers.CharField(required=False, allow_blank=True, max_length=5000)
        state = serializers.ChoiceField(
            choices=[FailureRecord.State.RESOLVED, FailureRecord.State.IGNORED],
            default=FailureRecord.State.RESOLVED,
        )

    @extend_schema(
        operation_id="failures_resolve",
        summary="Close the failure as resolved or ignored, with a comment",
        request=InputSerializer,
        parameters=error_headers(),
        responses=_action_responses(
            "FailureResolveResult",
            "changed",
            "False when it already was in that state.",
            ["invalid_comment", "invalid_state"],
        ),
    )
    def post(self, request: Request, failure_id: int) -> Response:
        data = _validated(self.InputSerializer, request.data)
        if data["state"] == FailureRecord.State.IGNORED:
            _require(request, "ignore_failurerecord", "ignore")
        else:
            _require(request, "resolve_failurerecord", "resolve")
        record = _get_record(failure_id)
        changed = failure_close(
            record=record,
            by=cast(User, request.user),
            comment=data.get("comment", ""),
            state=data["state"],
        )
        record = _get_record(failure_id)
        return Response({"changed": changed, "failure": FailureOutputSerializer(record).data})


def _validated(serializer_class: type[serializers.Serializer], data: object) -> dict:
    serializer = serializer_class(data=data if data else {})
    if not serializer.is_valid():
        field = next(iter(serializer.errors))
        raise ValidationFailed(
            f"{field}: {serializer.errors[field][0]}",
            code=f"invalid_{field}" if field != "non_field_errors" else "invalid_request",
            detail=serializer.errors,
        )
    return dict(serializer.validated_data)
