"""Staff API of the MCP servers: ``GET /api/v1/mcp-servers/`` (each with the tools it offers)
and ``POST`` to register one (its tools listed first; ``201``, or ``200`` when NAME existed
and was changed). Scope ``admin``. Thin: validate, call one service, serialize."""

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import BasePermission, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.errors import ApplicationError, ValidationFailed
from api.pagination import paginated_response
from api.schema import error_headers, errors, page_responses
from keys.permissions import HasScope
from keys.scopes import ADMIN
from mcp_tools.models import EDITABLE_FIELDS, MCPServer
from mcp_tools.registry import SEPARATOR, offered_tools
from mcp_tools.services import MCPServerFields, mcp_server_save


class MCPServerOutputSerializer(serializers.ModelSerializer):
    offered_tools = serializers.SerializerMethodField(
        help_text="What runs may name: <server>__<tool>, its description and input schema."
    )

    class Meta:
        model = MCPServer
        fields = [
            *EDITABLE_FIELDS,
            "offered_tools",
            "tools_refreshed_at",
            "consecutive_failures",
            "last_error",
            "last_failure_at",
            "created_at",
            "updated_at",
        ]

    def get_offered_tools(self, server: MCPServer) -> list[dict[str, Any]]:
        approval = set(server.approval_tools or [])
        return [
            {
                "name": f"{server.name}{SEPARATOR}{tool['name']}",
                "description": tool.get("description", ""),
                "input_schema": tool["input_schema"],
                "requires_approval": tool["name"] in approval,
            }
            for tool in offered_tools(server)
        ]


@extend_schema_serializer(component_name="MCPServerRegister")
class MCPServerInputSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="A slug; its tools are <name>__<tool>.")
    url = serializers.CharField(help_text="The Streamable HTTP endpoint.")
    auth = serializers.ChoiceField(choices=MCPServer.Auth.values, default=MCPServer.Auth.NONE)
    bearer_env = serializers.CharField(
        required=False, allow_blank=True, help_text="The NAME of the token's variable."
    )
    oauth_token_url = serializers.CharField(required=False, allow_blank=True)
    oauth_client_id = serializers.CharField(required=False, allow_blank=True)
    oauth_secret_env = serializers.CharField(required=False, allow_blank=True)
    oauth_scope = serializers.CharField(required=False, allow_blank=True)
    timeout_seconds = serializers.FloatField(required=False, default=30.0)
    enabled = serializers.BooleanField(required=False, default=True)
    allowed_tools = serializers.ListField(child=serializers.CharField(), required=False)
    approval_tools = serializers.ListField(child=serializers.CharField(), required=False)
    price_per_call_usd = serializers.DecimalField(
        max_digits=12, decimal_places=6, required=False, allow_null=True
    )
    tool_prices = serializers.DictField(child=serializers.CharField(), required=False)


class CanViewMCPServers(BasePermission):
    message = "You do not have permission to view MCP servers."

    def has_permission(self, request, view):  # type: ignore[no-untyped-def]
        return request.user.has_perm("mcp_tools.view_mcpserver")


class MCPServerListCreateApi(APIView):
    required_scopes = {"GET": ADMIN, "POST": ADMIN}
    permission_classes = [HasScope, IsAdminUser, CanViewMCPServers]
    pagination_class = PageNumberPagination

    @extend_schema(
        operation_id="mcp_servers_list",
        summary="The registered MCP servers and the tools each offers (staff)",
        parameters=error_headers(),
        responses=page_responses(MCPServerOutputSerializer, {403: ["permission_denied"]}),
    )
    def get(self, request: Request) -> Response:
        servers = MCPServer.objects.order_by("name")
        return paginated_response(request, self, servers, MCPServerOutputSerializer)

    @extend_schema(
        operation_id="mcp_servers_register",
        summary="Register an MCP server, or change the one of that name (staff)",
        request=MCPServerInputSerializer,
        parameters=error_headers(),
        responses={
            200: MCPServerOutputSerializer,
            201: MCPServerOutputSerializer,
            **errors(
                {
                    400: ["invalid_mcp_server", "mcp_server_unavailable"],
                    403: ["permission_denied"],
                    413: [],
                    415: [],
                }
            ),
        },
    )
    def post(self, request: Request) -> Response:
        if not (
            request.user.has_perm("mcp_tools.add_mcpserver")
            and request.user.has_perm("mcp_tools.change_mcpserver")
        ):
            raise ApplicationError(
                "You do not have permission to register MCP servers.",
                code="permission_denied",
                status_code=403,
            )
        body = MCPServerInputSerializer(data=request.data)
        if not isinstance(request.data, dict) or not body.is_valid():
            errors_found = body.errors if isinstance(request.data, dict) else {"body": ["object"]}
            field = next(iter(errors_found), "body")
            raise ValidationFailed(
                f"{field}: {' '.join(str(e) for e in errors_found[field])}",
                code="invalid_mcp_server",
                detail={"field": field},
            )
        data = dict(body.validated_data)
        name = data.pop("name")
        server, created, _skipped = mcp_server_save(name=name, fields=MCPServerFields(**data))
        return Response(MCPServerOutputSerializer(server).data, status=201 if created else 200)
