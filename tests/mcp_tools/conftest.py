"""The MCP tests' server: a real MCP server built with the SDK (tests/mcp_tools/mcp_server.py),
one process per test module, behind bearer auth; its journal says what it saw."""

import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command

from tests.agents.conftest import agent_workers  # noqa: F401 (fixture)
from tests.conftest import ROOT

TOKEN_ENV = "MCP_TEST_API_KEY"
"""The variable the registered server names (the rule of a key's variable: ..._API_KEY)."""
TOKEN = "mcp-test-token-7f3a"
CLIENT_SECRET_ENV = "MCP_TEST_CLIENT_API_KEY"
CLIENT_SECRET = "mcp-test-client-secret-91c2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MCPTestServer:
    def __init__(self, url: str, journal: Path, process: subprocess.Popen[bytes]) -> None:
        self.url, self.journal, self.process = url, journal, process

    def _rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.journal, timeout=10) as db:
            return list(db.execute(sql, args).fetchall())

    def calls(self, tool: str | None = None) -> list[tuple[str, str, str]]:
        """(tool, idempotency key, Authorization header) of every call, oldest first."""
        rows = self._rows("SELECT tool, key, bearer FROM calls ORDER BY at")
        return [row for row in rows if tool is None or row[0] == tool]  # type: ignore[misc]

    def effects(self, key: str) -> list[str]:
        return [row[0] for row in self._rows("SELECT result FROM effects WHERE key = ?", key)]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def start_mcp_server(directory: Path) -> MCPTestServer:
    port = _free_port()
    journal = directory / "journal.sqlite3"
    log = directory / "mcp_server.log"
    env = {
        **os.environ,
        "MCP_TEST_SERVER_TOKEN": TOKEN,
        "MCP_TEST_SERVER_CLIENT_SECRET": CLIENT_SECRET,
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "tests/mcp_tools/mcp_server.py", str(port), str(journal)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)  # any answer (401): it listens
            break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"MCP test server did not start: {log.read_text()[-3000:]}")
        time.sleep(0.1)
    return MCPTestServer(url, journal, process)


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MCPTestServer]:
    server = start_mcp_server(tmp_path_factory.mktemp("mcp"))
    yield server
    server.stop()


@pytest.fixture
def mcp_token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    return TOKEN


def register(name: str, url: str, *options: str) -> str:
    """``manage.py llm_mcp add NAME --url URL --bearer-env MCP_TEST_API_KEY ...``: its output."""
    from io import StringIO

    out = StringIO()
    call_command(
        "llm_mcp", "add", name, "--url", url, "--bearer-env", TOKEN_ENV, *options, stdout=out
    )
    return out.getvalue()
