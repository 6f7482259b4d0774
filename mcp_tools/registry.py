"""The registered MCP servers' tools as agent tools (``<server>__<tool>``), the source agents/
looks them up in after its Python tools (agents/tools.py ``tool_source_register``).

Read from the database at each use (one indexed query for one name): a server added,
refreshed, limited or disabled is seen by every process at its next lookup, no restart. Each
tool is called like a Python tool, by the same step machinery (claimed, checkpointed, recorded
once), in a child process killed at the server's timeout plus ``KILL_GRACE_SECONDS``: the
call's own deadline (the server's timeout) ends it first, with an error result.
"""

from decimal import Decimal, InvalidOperation
from functools import partial
from typing import Any

from agents.tools import TOOL_NAME_RE, AgentTool, ToolError
from mcp_tools.client import load_sdk
from mcp_tools.models import SEPARATOR, MCPServer

__all__ = ["KILL_GRACE_SECONDS", "MCP_TOOLS", "SEPARATOR", "offered_tools", "tool_price"]

KILL_GRACE_SECONDS = 5.0
"""Past the server's timeout, the call's process is killed: the time to record a slow
server's failure (mcp_tools/services.py) before the process goes."""


def tool_price(server: MCPServer, tool: str) -> Decimal | None:
    """The price of one call: the tool's own, else the server's (None: free)."""
    own = (server.tool_prices or {}).get(tool)
    try:
        if own is not None:
            return Decimal(str(own))
    except InvalidOperation:
        return None
    return server.price_per_call_usd


def offered_tools(server: MCPServer) -> list[dict[str, Any]]:
    """The listed tools a run may call: every one, or those of the allow-list."""
    allowed = set(server.allowed_tools or [])
    return [t for t in server.tools or [] if not allowed or t["name"] in allowed]


def _call(*, arguments: dict[str, Any], call_id: str, server_id: int, tool: str) -> str:
    # Imported here: services imports the alerts app, which must not load at app start.
    from mcp_tools.services import mcp_tool_call

    answer = mcp_tool_call(server_id=server_id, tool=tool, arguments=arguments, call_id=call_id)
    if answer.is_error:
        raise ToolError(answer.output, billable=answer.reached)
    return answer.output


def _agent_tool(server: MCPServer, listed: dict[str, Any]) -> AgentTool:
    return AgentTool(
        name=f"{server.name}{SEPARATOR}{listed['name']}",
        description=listed.get("description") or f"{listed['name']} (MCP server {server.name})",
        input_schema=listed["input_schema"],
        function=partial(_call, server_id=server.id, tool=listed["name"]),
        requires_approval=listed["name"] in (server.approval_tools or []),
        timeout=server.timeout_seconds + KILL_GRACE_SECONDS,
        accepts_call_id=True,
        source=f"mcp:{server.name}",
        takes_arguments=True,
        price_usd=tool_price(server, listed["name"]),
    )


def _tools_of(server: MCPServer) -> dict[str, AgentTool]:
    tools = (_agent_tool(server, listed) for listed in offered_tools(server))
    return {tool.name: tool for tool in tools if TOOL_NAME_RE.fullmatch(tool.name)}


class MCPToolSource:
    def tool(self, name: str) -> AgentTool | None:
        server_name, separator, _tool = name.partition(SEPARATOR)
        if not separator:
            return None
        server = MCPServer.objects.filter(name=server_name, enabled=True).first()
        tool = _tools_of(server).get(name) if server is not None else None
        if tool is not None:
            load_sdk()  # before the call's child is forked: it must not import
        return tool

    def tools(self) -> dict[str, AgentTool]:
        tools: dict[str, AgentTool] = {}
        for server in MCPServer.objects.filter(enabled=True).order_by("name"):
            tools.update(_tools_of(server))
        return tools


MCP_TOOLS = MCPToolSource()
