"""Registering an MCP server by command and by API: its tools listed with the SDK, offered to
runs as <server>__<tool> with their schemas; secrets stay in the environment."""

import pytest
from django.core.management import CommandError, call_command

from mcp_tools.models import MCPServer
from tests.mcp_tools.conftest import CLIENT_SECRET, CLIENT_SECRET_ENV, TOKEN_ENV, register

pytestmark = pytest.mark.django_db


def test_it_registers_by_command_and_lists_the_tools_with_their_schemas(
    mcp_server, mcp_token, alice_client
):
    out = register("team", mcp_server.url, "--approval", "notify")
    assert "added MCP server team" in out
    assert "team__add" in out and "team__notify  (waits for approval)" in out
    assert "- a: integer (required)" in out

    server = MCPServer.objects.get(name="team")
    assert server.bearer_env == TOKEN_ENV and mcp_token not in str(server.__dict__)
    tools = {
        t["name"]: t
        for t in alice_client.get("/api/v1/agent-tools/?page_size=100").json()["results"]
    }
    add = tools["team__add"]
    assert add["source"] == "mcp:team" and add["requires_approval"] is False
    assert add["input_schema"]["properties"]["a"]["type"] == "integer"
    assert add["input_schema"]["required"] == ["a", "b"]
    assert add["description"] == "Add two integers."
    assert tools["team__notify"]["requires_approval"] is True
    assert tools["calculator"]["source"] == "python"  # the demo tools are still there
    # The server saw the bearer of the variable the row names.
    assert mcp_server.calls() == [] or all(
        c[2] == f"Bearer {mcp_token}" for c in mcp_server.calls()
    )


def test_an_allow_list_limits_the_tools_and_a_misspelt_one_gets_a_hint(mcp_server, mcp_token):
    out = register("limited", mcp_server.url, "--tools", "add")
    assert "limited__add" in out and "limited__notify" not in out
    with pytest.raises(CommandError, match="lists no tool 'ad'. Did you mean 'add'?"):
        register("limited", mcp_server.url, "--tools", "ad")


def test_a_wrong_token_refuses_the_registration_without_saying_the_token(mcp_server, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "not-the-token")
    with pytest.raises(CommandError) as refused:
        register("wrong", mcp_server.url)
    assert "HTTP 401" in str(refused.value) and "not-the-token" not in str(refused.value)
    assert not MCPServer.objects.filter(name="wrong").exists()


@pytest.mark.parametrize(
    "variable",
    ["DATABASE_URL", "DJANGO_SECRET_KEY", "MCP_TOKEN"],
    ids=["setting", "secret", "suffix"],
)
def test_a_variable_that_may_not_hold_a_token_is_refused(mcp_server, variable):
    with pytest.raises(CommandError, match="bearer_env"):
        call_command("llm_mcp", "add", "x", "--url", mcp_server.url, "--bearer-env", variable)


def test_list_refresh_and_remove(mcp_server, mcp_token, capsys):
    register("team", mcp_server.url)
    call_command("llm_mcp", "list")
    assert "team  " in capsys.readouterr().out
    call_command("llm_mcp", "refresh", "team")
    assert "refreshed MCP server team" in capsys.readouterr().out
    call_command("llm_mcp", "remove", "team")
    assert not MCPServer.objects.exists()
    with pytest.raises(CommandError, match="No MCP server named 'tem'"):
        call_command("llm_mcp", "refresh", "tem")


def test_oauth_client_credentials_fetch_a_token_for_the_servers_url(
    mcp_server, monkeypatch, capsys
):
    monkeypatch.setenv(CLIENT_SECRET_ENV, CLIENT_SECRET)
    token_url = mcp_server.url.removesuffix("/mcp") + "/token"
    call_command(
        "llm_mcp", "add", "oauth", "--url", mcp_server.url, "--oauth-token-url", token_url,
        "--oauth-client-id", "llmops-tests", "--oauth-secret-env", CLIENT_SECRET_ENV,
        "--oauth-scope", "tools:read",
    )  # fmt: skip
    assert "oauth__add" in capsys.readouterr().out
    server = MCPServer.objects.get(name="oauth")
    assert server.auth == "oauth" and CLIENT_SECRET not in str(server.__dict__)
    # The token was asked for the MCP server's URL (RFC 8707 resource indicator), with the scope.
    assert ("token", mcp_server.url, "tools:read") in mcp_server.calls("token")

    monkeypatch.setenv(CLIENT_SECRET_ENV, "a-wrong-secret")
    with pytest.raises(CommandError, match="the token URL answered HTTP 401") as refused:
        call_command("llm_mcp", "add", "oauth2", "--url", mcp_server.url, "--oauth-token-url",
                     token_url, "--oauth-client-id", "llmops-tests", "--oauth-secret-env",
                     CLIENT_SECRET_ENV)  # fmt: skip
    assert "a-wrong-secret" not in str(refused.value)
