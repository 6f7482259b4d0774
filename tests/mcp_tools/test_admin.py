"""The admin registers an MCP server through the same checks and listing as ``llm_mcp add``."""

import pytest

from mcp_tools.models import MCPServer
from tests.conftest import make_user
from tests.mcp_tools.conftest import TOKEN_ENV

pytestmark = pytest.mark.django_db

FORM = {
    "url": "",
    "auth": "bearer",
    "bearer_env": TOKEN_ENV,
    "timeout_seconds": "10",
    "enabled": "on",
    "allowed_tools": "[]",
    "approval_tools": '["notify"]',
    "tool_prices": "{}",
}


def test_the_admin_lists_the_tools_on_save_and_shows_why_it_cannot(client, mcp_server, mcp_token):
    client.force_login(make_user("root", superuser=True, is_staff=True))
    saved = client.post(
        "/admin/mcp_tools/mcpserver/add/", {**FORM, "name": "team", "url": mcp_server.url}
    )
    assert saved.status_code == 302, saved.content.decode()[-2000:]
    server = MCPServer.objects.get(name="team")
    assert {t["name"] for t in server.tools} >= {"add", "notify"}
    assert server.tools_refreshed_at is not None

    refused = client.post(
        "/admin/mcp_tools/mcpserver/add/",
        {**FORM, "name": "down", "url": "http://127.0.0.1:9/mcp"},
    )
    assert refused.status_code == 200 and "could not be listed" in refused.content.decode()
    assert not MCPServer.objects.filter(name="down").exists()
