"""The MCP SDK boundary: list a server's tools, call one. Streamable HTTP through the official
``mcp`` client, one short session per use (the 2026-07-28 revision is stateless), bounded by
the server's timeout. ``mcp_call`` never raises: it returns what the model is to see and
whether the server was reached; ``mcp_list_tools`` raises ``MCPUnavailable`` with a message
fit for an operator. No secret is ever part of a message.
"""

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio._backends._asyncio  # noqa: F401 (loaded here: a tool call's forked child must not import)
import httpx
import httpx2

from mcp_tools.models import MCPServer
from providers.key_envs import key_env_problem

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import RequestParamsMeta

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "MCPAnswer",
    "MCPUnavailable",
    "load_sdk",
    "mcp_call",
    "mcp_list_tools",
]

IDEMPOTENCY_META_KEY = "io.llmops/idempotency-key"
"""The ``_meta`` key of every call: the step's ``call_id``, the same on every retry, so that a
server keeps a side effect once when a worker died mid-call."""
TOKEN_EARLY_SECONDS = 30
"""An OAuth token is fetched again this long before it expires."""


class MCPUnavailable(Exception):
    """The server could not be used (down, slow, refused, misconfigured): the message says
    why. ``reached``: it may have started the work (a call that timed out)."""

    def __init__(self, message: str, *, reached: bool = False) -> None:
        super().__init__(message)
        self.reached = reached


@dataclass(frozen=True)
class MCPAnswer:
    output: str
    """What the model sees: the text content, plus the structured content when it says more."""
    is_error: bool
    reached: bool = True
    """False: the call never reached the tool (down, refused): nothing to book."""
    failure: str = ""
    """Why the server could not be used (counted toward its alert); empty when it answered."""


def load_sdk() -> None:
    """Import the ``mcp`` SDK (about half a second of CPU) in this process, once. Not at module
    import: every Django process (web, each worker, each command) would pay it, and most never
    call an MCP server. The tool registry calls this when it offers an MCP tool, so that a
    worker has it before it forks a tool call's child (agents/tool_processes.py), which must
    not import."""
    import mcp.client.streamable_http  # noqa: F401
    import mcp.shared.exceptions  # noqa: F401
    import mcp_types  # noqa: F401


# --- Auth ---------------------------------------------------------------------------------------

_tokens: dict[tuple[int, str, str, str], tuple[str, float]] = {}
"""This process's OAuth access tokens: (server, token URL, client, scope) -> (token, expiry)."""


def _secret(variable: str, what: str) -> str:
    if not variable:
        raise MCPUnavailable(f"no {what} variable is configured")
    problem = key_env_problem(variable)
    if problem:  # a row written around the checks: its variable is never read
        raise MCPUnavailable(f"{what} variable refused: {problem}")
    value = os.environ.get(variable, "")
    if not value:
        raise MCPUnavailable(f"the {what} variable {variable} is not set in this process")
    return value


def _oauth_token(server: MCPServer) -> str:
    """OAuth 2.1 client credentials, with the server's URL as the resource indicator (RFC 8707)."""
    key = (server.id, server.oauth_token_url, server.oauth_client_id, server.oauth_scope)
    cached = _tokens.get(key)
    if cached and cached[1] > time.monotonic():
        return cached[0]
    secret = _secret(server.oauth_secret_env, "OAuth client secret")
    data = {"grant_type": "client_credentials", "resource": server.url}
    if server.oauth_scope:
        data["scope"] = server.oauth_scope
    try:
        response = httpx.post(
            server.oauth_token_url,
            data=data,
            auth=(server.oauth_client_id, secret),
            timeout=server.timeout_seconds,
        )
    except httpx.HTTPError as exc:
        raise MCPUnavailable(f"the token URL could not be reached: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise MCPUnavailable(f"the token URL answered HTTP {response.status_code}")
    try:
        body = response.json()
        token = str(body["access_token"])
        expires_in = float(body.get("expires_in") or 300)
    except (ValueError, KeyError, TypeError):
        raise MCPUnavailable("the token URL's answer has no access_token") from None
    _tokens[key] = (token, time.monotonic() + max(expires_in - TOKEN_EARLY_SECONDS, 1))
    return token


def _headers(server: MCPServer) -> dict[str, str]:
    if server.auth == MCPServer.Auth.BEARER:
        return {"Authorization": f"Bearer {_secret(server.bearer_env, 'bearer token')}"}
    if server.auth == MCPServer.Auth.OAUTH:
        return {"Authorization": f"Bearer {_oauth_token(server)}"}
    return {}


# --- One session ---------------------------------------------------------------------------------


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def _why(error: BaseException, statuses: list[int], server: MCPServer) -> MCPUnavailable:
    """What went wrong, said for a person (never the error's own text: it may quote a URL's
    credentials or a header)."""
    from mcp.shared.exceptions import MCPError

    refused = [s for s in statuses if s >= 400]
    if refused:
        status = refused[-1]
        hint = " (check the token's variable)" if status in (401, 403) else ""
        return MCPUnavailable(f"the server answered HTTP {status}{hint}")
    for leaf in _leaves(error):
        if isinstance(leaf, TimeoutError | httpx2.TimeoutException):
            return MCPUnavailable(
                f"no answer within its timeout ({server.timeout_seconds:g} s)", reached=True
            )
        if isinstance(leaf, httpx2.ConnectError):
            return MCPUnavailable("the server cannot be reached (connection failed)")
        if isinstance(leaf, httpx2.TransportError):
            return MCPUnavailable(f"the connection failed: {type(leaf).__name__}", reached=True)
        if isinstance(leaf, MCPError):
            return MCPUnavailable(f"the server answered an error: {leaf.error.message}")
    return MCPUnavailable(f"the call failed: {type(error).__name__}")


async def _with_session(server: MCPServer, headers: dict[str, str], use: Any) -> Any:
    statuses: list[int] = []

    async def seen(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(server.timeout_seconds),
        event_hooks={"response": [seen]},
    )
    try:
        with anyio.fail_after(server.timeout_seconds):
            async with (
                http,
                Client(streamable_http_client(server.url, http_client=http), cache=None) as client,
            ):
                return await use(client)
    except MCPUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 (every failure of the session is one answer)
        raise _why(exc, statuses, server) from None


def _run(server: MCPServer, use: Any) -> Any:
    headers = _headers(server)
    return anyio.run(_with_session, server, headers, use)


# --- Listing and calling -------------------------------------------------------------------------


def mcp_list_tools(server: MCPServer) -> list[dict[str, Any]]:
    """Every tool the server lists (all pages): name, description, input schema."""

    async def listing(client: "Client") -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(100):  # a server whose pages never end cannot hang a refresh
            page = await client.list_tools(cursor=cursor)
            tools += [
                {
                    "name": tool.name,
                    "description": tool.description or tool.title or "",
                    "input_schema": tool.input_schema,
                }
                for tool in page.tools
            ]
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    result: list[dict[str, Any]] = _run(server, listing)
    return result


def _output(result: Any) -> str:
    parts = []
    for block in result.content:
        if getattr(block, "type", "") == "text":
            parts.append(block.text)
        else:  # an image, audio, a resource: as the server described it
            parts.append(json.dumps(block.model_dump(mode="json", exclude_none=True)))
    text = "\n".join(parts)
    structured = result.structured_content
    if structured is None:
        return text
    try:
        if json.loads(text) == structured:
            return text  # the text is already its serialisation (the spec's advice)
    except ValueError:
        pass
    encoded = json.dumps(structured, ensure_ascii=False)
    return f"{text}\n\nStructured content: {encoded}" if text else encoded


def mcp_call(
    server: MCPServer, *, tool: str, arguments: dict[str, Any], idempotency_key: str
) -> MCPAnswer:
    """Call one tool; never raises. ``isError`` is an error result the model sees."""

    async def call(client: "Client") -> MCPAnswer:
        result = await client.call_tool(
            tool,
            arguments,
            meta=cast("RequestParamsMeta", {IDEMPOTENCY_META_KEY: idempotency_key}),
        )
        return MCPAnswer(_output(result), bool(result.is_error))

    try:
        answer: MCPAnswer = _run(server, call)
    except MCPUnavailable as exc:
        message = f"MCP server {server.name}: {exc}"
        return MCPAnswer(message, True, reached=exc.reached, failure=message)
    return answer
