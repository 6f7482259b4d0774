"""The APIs of issue 42: GET /api/v1/agent-tools/, GET/POST /api/v1/mcp-servers/ (scope admin),
and an unknown tool's refusal naming the tools and the nearest one."""

import pytest
from rest_framework.test import APIClient

from keys.testing import api_key_for
from mcp_tools.models import MCPServer
from tests.conftest import make_user
from tests.mcp_tools.conftest import TOKEN, TOKEN_ENV, register

pytestmark = pytest.mark.django_db


def _staff_client(*codenames: str) -> APIClient:
    staff = make_user("staff-mcp", *codenames, is_staff=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_for(staff, scopes=['admin'])}")
    return client


def test_an_unknown_tool_is_refused_with_the_tools_and_the_nearest_one(alice_client):
    body = {
        "feature": "agent-test",
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": ["calculater"],
    }
    response = alice_client.post("/api/v1/agent-runs/", body, format="json")
    assert response.status_code == 400
    error = response.json()
    assert error["code"] == "unknown_tool"
    assert "Did you mean 'calculator'?" in error["message"]
    assert error["detail"]["did_you_mean"] == "calculator"
    assert {"calculator", "clock", "send_email"} <= set(error["detail"]["tools"])

    far = alice_client.post("/api/v1/agent-runs/", {**body, "tools": ["zzz"]}, format="json")
    assert "Did you mean" not in far.json()["message"] and "calculator" in far.json()["message"]


def test_a_misspelt_mcp_tool_gets_its_nearest_name(alice_client, mcp_server, mcp_token):
    register("team", mcp_server.url)
    body = {
        "feature": "agent-test",
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": ["team__ad"],
    }
    error = alice_client.post("/api/v1/agent-runs/", body, format="json").json()
    assert error["code"] == "unknown_tool" and error["detail"]["did_you_mean"] == "team__add"


def test_staff_register_and_list_servers_by_api_without_a_secret_in_any_body(
    client, mcp_server, mcp_token
):
    api = _staff_client("view_mcpserver", "add_mcpserver", "change_mcpserver")
    body = {
        "name": "team",
        "url": mcp_server.url,
        "auth": "bearer",
        "bearer_env": TOKEN_ENV,
        "approval_tools": ["notify"],
        "price_per_call_usd": "0.01",
    }
    created = api.post("/api/v1/mcp-servers/", body, format="json")
    assert created.status_code == 201, created.content
    offered = {tool["name"]: tool for tool in created.json()["offered_tools"]}
    assert offered["team__notify"]["requires_approval"] is True
    assert offered["team__add"]["input_schema"]["required"] == ["a", "b"]
    again = api.post("/api/v1/mcp-servers/", {**body, "allowed_tools": ["add"]}, format="json")
    assert again.status_code == 200 and [t["name"] for t in again.json()["offered_tools"]] == [
        "team__add"
    ]
    typo = api.post("/api/v1/mcp-servers/", {**body, "allowed_tools": ["ad"]}, format="json")
    assert typo.status_code == 400 and typo.json()["code"] == "invalid_mcp_server"
    assert "Did you mean 'add'?" in typo.json()["message"]
    listing = api.get("/api/v1/mcp-servers/")
    assert listing.status_code == 200 and listing.json()["results"][0]["name"] == "team"
    for response in (created, listing):
        assert TOKEN not in response.content.decode()


def test_a_secret_given_instead_of_its_variable_is_refused(mcp_server):
    api = _staff_client("view_mcpserver", "add_mcpserver", "change_mcpserver")
    body = {"name": "team", "url": mcp_server.url, "auth": "bearer", "bearer_env": "sk_live_123"}
    response = api.post("/api/v1/mcp-servers/", body, format="json")
    assert response.status_code == 400 and response.json()["detail"]["field"] == "bearer_env"
    assert not MCPServer.objects.exists()


def test_registering_needs_the_add_permission(mcp_server):
    api = _staff_client("view_mcpserver")
    response = api.post("/api/v1/mcp-servers/", {"name": "x", "url": mcp_server.url}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
