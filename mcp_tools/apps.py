from django.apps import AppConfig


class McpToolsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "mcp_tools"
    verbose_name = "MCP servers"

    def ready(self) -> None:
        from agents.tools import tool_source_register
        from mcp_tools.registry import MCP_TOOLS

        # Every process offers the registered servers' tools to agent runs, read from the
        # database at each use: a server added or refreshed needs no restart.
        tool_source_register(MCP_TOOLS)
