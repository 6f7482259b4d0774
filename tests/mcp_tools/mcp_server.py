"""A real MCP server for the tests, built with the official SDK's server side (``MCPServer``,
Streamable HTTP, stateless) behind bearer auth, run as its own process:

    python tests/mcp_tools/mcp_server.py PORT JOURNAL

The token it accepts is ``MCP_TEST_SERVER_TOKEN`` in its environment. Every call is written to
the SQLite file JOURNAL (tool, the idempotency key of its ``_meta``, the bearer it saw), and a
side effect at most once per key, as a real server keeps one: the tests read both.
"""

import sqlite3
import sys
import time
from typing import Any

import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer

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


def build(port: int, path: str, token: str) -> Any:
    server = MCPServer(
        "llmops-test-tools",
        token_verifier=Verifier(token),
        auth=AuthSettings(
            issuer_url="http://127.0.0.1:9/",
            resource_server_url=f"http://127.0.0.1:{port}/mcp",
            validate_token_resource=False,
        ),
    )

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
    app = build(port, path, os.environ["MCP_TEST_SERVER_TOKEN"])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
