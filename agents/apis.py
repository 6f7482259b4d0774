"""Thin DRF views of /api/v1/agent-runs/: validate, call a service or selector, serialize."""

from typing import cast

from django.contrib.auth.models import User
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.api_schema import (
    SUBMIT_EXAMPLE,
    AgentRunSubmitSerializer,
    AgentRunSubmittedSerializer,
    ApprovalSerializer,
)
from agents.control import agent_run_cancel, agent_step_decide
from agents.creation import agent_run_create
from agents.models import AgentRun
from agents.representation import AgentRunOutputSerializer, AgentRunRowSerializer
from agents.selectors import agent_run_get_for_user, agent_run_list_for_user, agent_run_steps
from api.errors import ValidationFailed
from api.run_views import (
    RunCancelApi,
    RunDetailApi,
    RunList,
    RunListCreateApi,
    RunResource,
    RunSubmit,
)
from api.schema import error_headers, errors
from keys.scopes import JOBS_WRITE

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
    "invalid_callback_url",
    "max_cost_exceeded",
    "invalid_idempotency_key",
]


RUNS = RunResource(
    "agent_runs",
    "run",
    ("No such agent run.", "agent_run_not_found"),
    agent_run_get_for_user,
    "agents:agent-run-detail",
    context=lambda run: {"steps": agent_run_steps(run=run)},
)


def _output(run: AgentRun) -> dict:
    return dict(AgentRunOutputSerializer(run, context=RUNS.context(run)).data)


class AgentRunListCreateApi(RunListCreateApi):
    resource = RUNS
    submit = RunSubmit(
        agent_run_create,
        AgentRunSubmitSerializer,
        SUBMIT_EXAMPLE,
        OpenApiResponse(
            AgentRunSubmittedSerializer,
            description="Accepted: the first turn's job queued (or the first run of a "
            "repeated Idempotency-Key).",
        ),
        summary="Start an agent run: model turns and tool calls until the model answers",
        invalid=_SUBMIT_400,
    )
    listing = RunList(
        agent_run_list_for_user,
        AgentRunRowSerializer,
        what="runs",
        summary="The caller's agent runs, newest first (every run for staff who may view them)",
    )


class AgentRunDetailApi(RunDetailApi):
    resource = RUNS
    summary = "An agent run with every step"
    serializer = AgentRunOutputSerializer


class AgentRunApprovalApi(APIView):
    required_scopes = {"POST": JOBS_WRITE}

    @extend_schema(
        operation_id="agent_runs_approve",
        summary="Approve or reject a tool call that waits for a human",
        request=ApprovalSerializer,
        parameters=[RUNS.path_parameter, CALL_ID, *error_headers()],
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
        run = RUNS.lookup(request, run_id, permission="agents.approve_agentrun")
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


class AgentRunCancelApi(RunCancelApi):
    resource = RUNS
    summary = "Cancel an agent run (its running turn stops; no further step starts)"
    serializer = AgentRunOutputSerializer
    permission = "agents.cancel_agentrun"

    def cancel(self, run: AgentRun) -> AgentRun:
        return agent_run_cancel(run=run)
