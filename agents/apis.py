"""Thin DRF views of /api/v1/agent-runs/: validate, call a service or selector, serialize."""

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

from agents.api_schema import (
    SUBMIT_EXAMPLE,
    AgentRunSubmitSerializer,
    AgentRunSubmittedSerializer,
    ApprovalSerializer,
)
from agents.models import AgentRun, AgentStep
from agents.selectors import agent_run_get_for_user, agent_run_list_for_user, agent_run_steps
from agents.services import agent_run_cancel, agent_run_create, agent_step_decide
from api.errors import ValidationFailed
from api.pagination import Pagination, paginated_response
from api.path_ids import uuid_or_not_found
from api.schema import IDEMPOTENCY_KEY, PAGE_NOT_FOUND, error_headers, errors, location_header
from api.submit_throttles import SubmitThrottle
from api.submits import accepted_response, idempotency_key
from keys.permissions import request_api_key_id
from keys.scopes import JOBS_READ, JOBS_WRITE

RUN_ID = OpenApiParameter(
    "run_id",
    OpenApiTypes.UUID,
    OpenApiParameter.PATH,
    description="The run's id; any other value, or another user's run, answers 404.",
)
CALL_ID = OpenApiParameter(
    "call_id", OpenApiTypes.STR, OpenApiParameter.PATH, description="The model's tool_use id."
)
_SUBMIT_400 = [
    "invalid_body",
    "unknown_field",
    "invalid_feature",
    "unknown_model",
    "invalid_messages",
    "invalid_max_tokens",
    "invalid_system",
    "invalid_metadata",
    "invalid_tools",
    "unknown_tool",
    "invalid_max_turns",
    "invalid_max_cost_usd",
    "invalid_deadline",
    "invalid_tags",
    "budget_exceeded",
    "invalid_idempotency_key",
]


def _parse_id(value: str) -> uuid.UUID:
    return uuid_or_not_found(value, message="No such agent run.", code="agent_run_not_found")


class AgentErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class AgentOutputSerializer(serializers.Serializer):
    text = serializers.CharField()
    content = serializers.ListField(child=serializers.DictField())


class AgentStepSerializer(serializers.ModelSerializer):
    job = serializers.UUIDField(source="job_id", allow_null=True, help_text="A turn's job.")
    input = serializers.JSONField(allow_null=True, help_text="A tool call's input.")
    output = serializers.JSONField(
        allow_null=True,
        help_text="What the step added: a turn's content blocks, a tool call's result text.",
    )

    class Meta:
        model = AgentStep
        fields = [
            "index",
            "turn",
            "kind",
            "status",
            "job",
            "name",
            "call_id",
            "input",
            "output",
            "is_error",
            "attempts",
            "started_at",
            "finished_at",
        ]


class AgentRunRowSerializer(serializers.ModelSerializer):
    cost_usd = serializers.DecimalField(max_digits=16, decimal_places=6, coerce_to_string=True)
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    error = serializers.SerializerMethodField()

    class Meta:
        model = AgentRun
        fields = [
            "id",
            "status",
            "feature",
            "model",
            "turns",
            "max_turns",
            "tags",
            "deadline",
            "cost_usd",
            "error",
            "created_at",
            "finished_at",
        ]

    @extend_schema_field(AgentErrorSerializer(allow_null=True))
    def get_error(self, run: AgentRun) -> dict[str, str] | None:
        if not run.error_code:
            return None
        return {"code": run.error_code, "message": run.error_message}


class AgentRunOutputSerializer(AgentRunRowSerializer):
    """A run with every step; ``context["steps"]`` holds them (agent_run_steps)."""

    output = serializers.SerializerMethodField()
    pending_approvals = serializers.SerializerMethodField()
    steps = serializers.SerializerMethodField()

    class Meta(AgentRunRowSerializer.Meta):
        fields = [*AgentRunRowSerializer.Meta.fields, "output", "pending_approvals", "steps"]

    @extend_schema_field(AgentOutputSerializer(allow_null=True))
    def get_output(self, run: AgentRun) -> Any:
        return run.output

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_pending_approvals(self, run: AgentRun) -> list[str]:
        """The call ids waiting for a decision."""
        return [
            s.call_id
            for s in self.context["steps"]
            if s.status == AgentStep.Status.WAITING_APPROVAL
        ]

    @extend_schema_field(AgentStepSerializer(many=True))
    def get_steps(self, run: AgentRun) -> list:
        return list(AgentStepSerializer(self.context["steps"], many=True).data)


def _output(run: AgentRun) -> dict:
    steps = agent_run_steps(run=run)
    return dict(AgentRunOutputSerializer(run, context={"steps": steps}).data)


class AgentRunListCreateApi(APIView):
    required_scopes = {"GET": JOBS_READ, "POST": JOBS_WRITE}
    # A run is a submit: it shares the per-user submit rate with jobs (POST only).
    throttle_classes = [SubmitThrottle]
    pagination_class = Pagination

    @extend_schema(
        operation_id="agent_runs_submit",
        summary="Start an agent run: model turns and tool calls until the model answers",
        request=AgentRunSubmitSerializer,
        examples=[SUBMIT_EXAMPLE],
        parameters=[IDEMPOTENCY_KEY, location_header("The run's status URL."), *error_headers()],
        responses={
            202: OpenApiResponse(
                AgentRunSubmittedSerializer,
                description="Accepted: the first turn's job queued (or the first run of a "
                "repeated Idempotency-Key).",
            ),
            **errors(
                {
                    400: _SUBMIT_400,
                    409: ["idempotency_conflict"],
                    413: [],
                    415: [],
                    429: ["budget_exceeded"],
                }
            ),
        },
    )
    def post(self, request: Request) -> Response:
        run, _created = agent_run_create(
            user=cast(User, request.user),
            data=request.data,
            idempotency_key=idempotency_key(request),
            api_key_id=request_api_key_id(request),
        )
        return accepted_response(request, run, status_url_name="agents:agent-run-detail")

    @extend_schema(
        operation_id="agent_runs_list",
        summary="The caller's agent runs, newest first (every run for staff who may view them)",
        parameters=[
            OpenApiParameter("status", enum=AgentRun.Status.values),
            OpenApiParameter("tag", str, description="Only runs carrying this tag."),
            *error_headers(),
        ],
        responses={
            200: AgentRunRowSerializer(many=True),
            **errors({400: ["invalid_filter"], 404: []}, descriptions=PAGE_NOT_FOUND),
        },
    )
    def get(self, request: Request) -> Response:
        runs = agent_run_list_for_user(
            user=cast(User, request.user),
            status=request.query_params.get("status"),
            tag=request.query_params.get("tag"),
        )
        return paginated_response(request, self, runs, AgentRunRowSerializer)


class AgentRunDetailApi(APIView):
    required_scopes = {"GET": JOBS_READ}

    @extend_schema(
        operation_id="agent_runs_retrieve",
        summary="An agent run with every step",
        parameters=[RUN_ID, *error_headers()],
        responses={200: AgentRunOutputSerializer, **errors({404: ["agent_run_not_found"]})},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = agent_run_get_for_user(user=cast(User, request.user), run_id=_parse_id(run_id))
        return Response(_output(run))


class AgentRunApprovalApi(APIView):
    required_scopes = {"POST": JOBS_WRITE}

    @extend_schema(
        operation_id="agent_runs_approve",
        summary="Approve or reject a tool call that waits for a human",
        request=ApprovalSerializer,
        parameters=[RUN_ID, CALL_ID, *error_headers()],
        responses={
            200: AgentRunOutputSerializer,
            **errors(
                {
                    400: ["invalid_approval"],
                    404: ["agent_run_not_found", "call_not_found"],
                    409: ["not_waiting_approval"],
                    415: [],
                }
            ),
        },
    )
    def post(self, request: Request, run_id: str, call_id: str) -> Response:
        run = agent_run_get_for_user(
            user=cast(User, request.user),
            run_id=_parse_id(run_id),
            permission="agents.approve_agentrun",
        )
        body = ApprovalSerializer(data=request.data)
        if not isinstance(request.data, dict) or not body.is_valid():
            raise ValidationFailed(
                'The body must be {"approve": true | false, "reason": "..."}.',
                code="invalid_approval",
                detail={"field": "approve"},
            )
        decided = agent_step_decide(
            run=run,
            call_id=call_id,
            approve=body.validated_data["approve"],
            reason=body.validated_data.get("reason", ""),
            user=cast(User, request.user),
        )
        return Response(_output(decided))


class AgentRunCancelApi(APIView):
    required_scopes = {"POST": JOBS_WRITE}

    @extend_schema(
        operation_id="agent_runs_cancel",
        summary="Cancel an agent run (its running turn stops; no further step starts)",
        request=None,
        parameters=[RUN_ID, *error_headers()],
        responses={
            200: AgentRunOutputSerializer,
            **errors({404: ["agent_run_not_found"], 409: ["not_cancellable"]}),
        },
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = agent_run_get_for_user(
            user=cast(User, request.user),
            run_id=_parse_id(run_id),
            permission="agents.cancel_agentrun",
        )
        return Response(_output(agent_run_cancel(run=run)))
