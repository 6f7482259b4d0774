"""A real MCP server for the tests, built with the official SDK's server side (``MCPServer``,
Streamable HTTP, stateless) behind bearer auth, run as its own process:

    python tests/mcp_tools/mcp_server.py PORT JOURNAL

The token it accepts is ``MCP_TEST_SERVER_TOKEN`` in its environment, given as it is or issued by
its OAuth token endpoint (``/token``: client credentials ``llmops-tests`` and
``MCP_TEST_SERVER_CLIENT_SECRET``, the resource indicator its own URL). Every call is written to
the SQLite file JOURNAL (tool, the idempotency key of its ``_meta``, the bearer it saw), and a
side effect at most once per key, as a real server keeps one: the tests read both.
"""

import base64
import sqlite3
import sys
import time
from typing import Any

import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

KEY = "io.llmops/idempotency-key"
SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (tool TEXT, key TEXT, bearer TEXT, at REAL);
CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, tool TEXT, result TEXT, at REAL);
"""


def journal(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=10, isolation_level=None)
    db.executescript(SCHEMA)
    return db


class Verifier:
    def __init__(self, token: str) -> None:
        self.token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        if token != self.token:
            return None
        return AccessToken(token=token, client_id="llmops-tests", scopes=[])


def build(port: int, path: str, token: str, client_secret: str) -> Any:
    server = MCPServer(
        "llmops-test-tools",
        token_verifier=Verifier(token),
        auth=AuthSettings(
            issuer_url="http://127.0.0.1:9/",
            resource_server_url=f"http://127.0.0.1:{port}/mcp",
            validate_token_resource=False,
        ),
    )

    @server.custom_route("/token", methods=["POST"])
    async def issue(request: Request) -> Response:
        """OAuth 2.1 client credentials (RFC 6749 4.4) with a resource indicator (RFC 8707)."""
        form = await request.form()
        expected = base64.b64encode(f"llmops-tests:{client_secret}".encode()).decode()
        journal(path).execute(
            "INSERT INTO calls VALUES (?, ?, ?, ?)",
            ("token", str(form.get("resource", "")), str(form.get("scope", "")), time.time()),
        )
        if request.headers.get("authorization") != f"Basic {expected}":
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if form.get("grant_type") != "client_credentials":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        if form.get("resource") != f"http://127.0.0.1:{port}/mcp":
            return JSONResponse({"error": "invalid_target"}, status_code=400)
        return JSONResponse({"access_token": token, "token_type": "Bearer", "expires_in": 3600})

    def called(tool: str, ctx: Context) -> str:
        meta = ctx.request_context.meta or {}
        key = str(meta.get(KEY, ""))
        bearer = (ctx.headers or {}).get("authorization", "")
        journal(path).execute(
            "INSERT INTO calls VALUES (?, ?, ?, ?)", (tool, key, bearer, time.time())
        )
        return key

    def once(key: str, tool: str, result: str) -> str:
        """The side effect, kept once per idempotency key: a repeat answers the first result."""
        db = journal(path)
        db.execute(
            "INSERT OR IGNORE INTO effects VALUES (?, ?, ?, ?)", (key, tool, result, time.time())
        )
        return str(db.execute("SELECT result FROM effects WHERE key = ?", (key,)).fetchone()[0])

    @server.tool(description="Add two integers.")
    def add(a: int, b: int, ctx: Context) -> int:
        called("add", ctx)
        return a + b

    @server.tool(description="Send a message to a team (a side effect, kept once per key).")
    def notify(team: str, text: str, ctx: Context, seconds: float = 0) -> str:
        key = called("notify", ctx)
        done = journal(path).execute("SELECT result FROM effects WHERE key = ?", (key,)).fetchone()
        if done:
            return str(done[0])
        time.sleep(seconds)
        return once(key, "notify", f"sent to {team}: {text}")

    @server.tool(description="Always fails.")
    def broken(ctx: Context) -> str:
        called("broken", ctx)
        raise ValueError("the tool broke")

    return server.streamable_http_app(stateless_http=True, json_response=True)


if __name__ == "__main__":
    import os

    port, path = int(sys.argv[1]), sys.argv[2]
    journal(path)
    app = build(
        port, path, os.environ["MCP_TEST_SERVER_TOKEN"], os.environ["MCP_TEST_SERVER_CLIENT_SECRET"]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
