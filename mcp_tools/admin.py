"""The MCP servers in the admin: registered and changed through the same checks and listing as
``llm_mcp add`` (mcp_tools/services.py); ``llm_mcp refresh NAME`` lists its tools again."""

from django import forms
from django.contrib import admin

from api.errors import ApplicationError
from mcp_tools.models import EDITABLE_FIELDS, MCPServer
from mcp_tools.registry import SEPARATOR, offered_tools
from mcp_tools.services import mcp_server_prepare


class MCPServerForm(forms.ModelForm):
    class Meta:
        model = MCPServer
        fields = EDITABLE_FIELDS

    def _post_clean(self) -> None:
        super()._post_clean()  # type: ignore[misc]  # the instance now holds the form's values
        if not self.errors:
            try:
                mcp_server_prepare(self.instance)
            except ApplicationError as exc:
                self.add_error(None, exc.message)


@admin.register(MCPServer)
class MCPServerAdmin(admin.ModelAdmin):
    form = MCPServerForm
    list_display = ["name", "url", "auth", "enabled", "tool_count", "consecutive_failures"]
    list_filter = ["enabled", "auth"]
    search_fields = ["name", "url"]
    readonly_fields = [
        "offered",
        "tools_refreshed_at",
        "consecutive_failures",
        "last_error",
        "last_failure_at",
        "created_at",
        "updated_at",
    ]

    @admin.display(description="tools")
    def tool_count(self, server: MCPServer) -> int:
        return len(offered_tools(server))

    @admin.display(description="offered tools")
    def offered(self, server: MCPServer) -> str:
        approval = set(server.approval_tools or [])
        return (
            ", ".join(
                f"{server.name}{SEPARATOR}{tool['name']}"
                + (" (approval)" * (tool["name"] in approval))
                for tool in offered_tools(server)
            )
            or "-"
        )
