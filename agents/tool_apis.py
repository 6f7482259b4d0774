"""``GET /api/v1/agent-tools/``: every tool a run may name in its ``tools`` (Python tools and
the MCP servers' ``<server>__<tool>``), with what the model is told of each."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.tools import registered_tools
from api.pagination import paginated_response
from api.schema import error_headers, page_responses
from keys.scopes import JOBS_READ


class AgentToolSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="What a run names in its tools.")
    description = serializers.CharField()
    input_schema = serializers.JSONField(help_text="The JSON Schema of its input.")
    requires_approval = serializers.BooleanField(
        help_text="True: each call waits for a person's approval."
    )
    timeout_seconds = serializers.FloatField(source="timeout")
    source = serializers.CharField(  # type: ignore[assignment]
        help_text="python (an @agent_tool of this deployment) or mcp:<server>."
    )
    price_usd = serializers.DecimalField(
        max_digits=12,
        decimal_places=6,
        allow_null=True,
        help_text="Booked in the ledger for each call (null: free).",
    )


class AgentToolListApi(APIView):
    required_scopes = {"GET": JOBS_READ}
    pagination_class = PageNumberPagination

    @extend_schema(
        operation_id="agent_tools_list",
        summary="Every tool an agent run may name, by name",
        parameters=error_headers(),
        responses=page_responses(AgentToolSerializer, {}),
    )
    def get(self, request: Request) -> Response:
        tools = sorted(registered_tools().values(), key=lambda tool: tool.name)
        return paginated_response(request, self, tools, AgentToolSerializer)
