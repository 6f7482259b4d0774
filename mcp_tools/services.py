"""Writes on the MCP servers: register or change one (its tools listed with the SDK first),
refresh its listing, remove it, and the outcome of each call (a server that fails calls in a
row raises a WARNING alert). ``manage.py llm_mcp``, the API and the admin call these.
"""

import logging
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agents.tools import TOOL_NAME_RE
from api.did_you_mean import nearest_name
from api.errors import NotFound, ValidationFailed
from mcp_tools.client import MCPAnswer, MCPUnavailable, mcp_call, mcp_list_tools
from mcp_tools.models import SEPARATOR, MCPServer
from providers.key_envs import key_env_problem

__all__ = [
    "MCPServerFields",
    "mcp_server_check",
    "mcp_server_prepare",
    "mcp_server_refresh",
    "mcp_server_remove",
    "mcp_server_save",
    "mcp_tool_call",
]

logger = logging.getLogger(__name__)


@dataclass
class MCPServerFields:
    """What a registration sets (the command's options, the API's body)."""

    url: str
    auth: str = MCPServer.Auth.NONE
    bearer_env: str = ""
    oauth_token_url: str = ""
    oauth_client_id: str = ""
    oauth_secret_env: str = ""
    oauth_scope: str = ""
    timeout_seconds: float = 30.0
    enabled: bool = True
    allowed_tools: list[str] = field(default_factory=list)
    approval_tools: list[str] = field(default_factory=list)
    price_per_call_usd: Decimal | None = None
    tool_prices: dict[str, str] = field(default_factory=dict)


def _invalid(field_name: str, message: str) -> ValidationFailed:
    return ValidationFailed(
        f"{field_name}: {message}", code="invalid_mcp_server", detail={"field": field_name}
    )


def _check_url(field_name: str, value: str) -> None:
    url = urlsplit(value)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise _invalid(field_name, f"{value!r} is not an http:// or https:// URL")
    if url.username or url.password:
        raise _invalid(field_name, "credentials never go in the URL: name their variable")


def _check_env(field_name: str, value: str, needed: bool) -> None:
    if needed and not value:
        raise _invalid(field_name, "name the environment variable that holds the secret")
    problem = key_env_problem(value)
    if problem:
        raise _invalid(field_name, problem)


def mcp_server_check(server: MCPServer) -> None:
    """The row's fields, each checked (``ValidationFailed`` naming the first bad one)."""
    try:
        server.full_clean(validate_unique=False)
    except ValidationError as exc:
        name, messages = next(iter(exc.message_dict.items()))
        raise _invalid(name, " ".join(messages)) from None
    _check_url("url", server.url)
    if not 0 < server.timeout_seconds <= 600:
        raise _invalid("timeout_seconds", "a number of seconds from 0 to 600")
    oauth = server.auth == MCPServer.Auth.OAUTH
    _check_env("bearer_env", server.bearer_env, server.auth == MCPServer.Auth.BEARER)
    _check_env("oauth_secret_env", server.oauth_secret_env, oauth)
    if oauth:
        _check_url("oauth_token_url", server.oauth_token_url)
        if not server.oauth_client_id:
            raise _invalid("oauth_client_id", "OAuth client credentials need the client id")
    if server.price_per_call_usd is not None and server.price_per_call_usd < 0:
        raise _invalid("price_per_call_usd", "a price is 0 or more USD")
    for tool, price in (server.tool_prices or {}).items():
        try:
            if Decimal(str(price)) < 0:
                raise InvalidOperation
        except InvalidOperation:
            raise _invalid("tool_prices", f"{tool}: {price!r} is not a price in USD") from None


def _usable(server: MCPServer, listed: list[dict[str, Any]]) -> tuple[list[dict], list[str]]:
    """The listed tools a run can name, and why each other one is left out."""
    usable, skipped = [], []
    for tool in listed:
        name = f"{server.name}{SEPARATOR}{tool['name']}"
        schema = tool.get("input_schema")
        if not TOOL_NAME_RE.fullmatch(name):
            skipped.append(f"{tool['name']}: {name!r} is not a tool name the model accepts")
            continue
        try:
            if not isinstance(schema, dict) or schema.get("type") != "object":
                raise SchemaError('an input schema has "type": "object"')
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            skipped.append(f"{tool['name']}: its input schema is not valid: {exc.message}")
            continue
        usable.append(tool)
    return usable, skipped


def _check_named_tools(server: MCPServer) -> None:
    listed = [t["name"] for t in server.tools]
    for field_name in ("allowed_tools", "approval_tools", "tool_prices"):
        for name in getattr(server, field_name) or []:
            if name not in listed:
                near = nearest_name(name, listed)
                hint = f" Did you mean {near!r}?" if near else f" It lists: {', '.join(listed)}."
                raise _invalid(field_name, f"{server.name} lists no tool {name!r}.{hint}")


def _listing(server: MCPServer) -> tuple[list[dict[str, Any]], list[str]]:
    try:
        return _usable(server, mcp_list_tools(server))
    except MCPUnavailable as exc:
        raise ValidationFailed(
            f"MCP server {server.name}: its tools could not be listed: {exc}",
            code="mcp_server_unavailable",
            detail={"server": server.name},
        ) from None


def mcp_server_prepare(server: MCPServer) -> list[str]:
    """Check an unsaved row and list its tools into it (what a save needs; the admin's form
    calls it too). Returns the tools left out, with why."""
    server.url = server.url.strip()
    mcp_server_check(server)
    server.tools, skipped = _listing(server)
    _check_named_tools(server)
    server.tools_refreshed_at = timezone.now()
    return skipped


def mcp_server_save(*, name: str, fields: MCPServerFields) -> tuple[MCPServer, bool, list[str]]:
    """Register the server ``name`` or change it: checked, its tools listed with the SDK (not
    in a transaction: a network call), then saved with them. Returns the row, whether it was
    created, and the tools left out (with why)."""
    server = MCPServer.objects.filter(name=name).first() or MCPServer(name=name)
    created = server.pk is None
    for key, value in fields.__dict__.items():
        setattr(server, key, value)
    skipped = mcp_server_prepare(server)
    server.save()
    logger.info(
        "MCP server %s %s: %s tools", name, "added" if created else "changed", len(server.tools)
    )
    return server, created, skipped


def mcp_server_refresh(*, name: str) -> tuple[MCPServer, list[str]]:
    """List the server's tools again (their schemas may have changed)."""
    server = _get(name)
    tools, skipped = _listing(server)
    MCPServer.objects.filter(id=server.id).update(
        tools=tools, tools_refreshed_at=timezone.now(), updated_at=timezone.now()
    )
    server.refresh_from_db()
    return server, skipped


def mcp_server_remove(*, name: str) -> None:
    """Its tools are no longer offered; a run that names one gets an unknown tool result."""
    _get(name).delete()


def _get(name: str) -> MCPServer:
    server = MCPServer.objects.filter(name=name).first()
    if server is None:
        known = list(MCPServer.objects.values_list("name", flat=True))
        near = nearest_name(name, known)
        hint = f" Did you mean {near!r}?" if near else ""
        raise NotFound(f"No MCP server named {name!r}.{hint}", code="mcp_server_not_found")
    return server


# --- Calls -----------------------------------------------------------------------------------


def mcp_tool_call(
    *, server_id: int, tool: str, arguments: dict[str, Any], call_id: str
) -> MCPAnswer:
    """Call the tool (in the tool call's own process, agents/tool_processes.py), and count the
    outcome toward the server's health."""
    server = MCPServer.objects.filter(id=server_id).first()
    if server is None or not server.enabled:
        return MCPAnswer("This MCP server is no longer registered or enabled.", True, False)
    answer = mcp_call(server, tool=tool, arguments=arguments, idempotency_key=call_id)
    if answer.failure:
        _call_failed(server, answer.failure)
    else:
        MCPServer.objects.filter(id=server.id, consecutive_failures__gt=0).update(
            consecutive_failures=0
        )
    return answer


def _call_failed(server: MCPServer, message: str) -> None:
    with transaction.atomic():
        MCPServer.objects.filter(id=server.id).update(
            consecutive_failures=F("consecutive_failures") + 1,
            last_error=message[:2000],
            last_failure_at=timezone.now(),
        )
        failures = MCPServer.objects.values_list("consecutive_failures", flat=True).get(
            id=server.id
        )
    logger.warning("%s (%s failures in a row)", message, failures)
    if failures < settings.LLM_MCP_ALERT_AFTER_FAILURES:
        return
    # Imported here: alerts imports the jobs app, which must not import alerts at start.
    from alerts.notifications import alert_raise

    alert_raise(
        fingerprint=f"mcp_server:{server.name}",
        severity="WARNING",
        source="mcp_server",
        title=f"MCP server {server.name} failed {failures} calls in a row",
        body=(
            f"{message}\n\nAgent runs calling its tools get an error result and go on. Check "
            f"the server at {_where(server.url)} and its token's variable; the next call that "
            "reaches "
            "it resets the count."
        ),
        details={"server": server.name, "failures": failures, "error": message},
    )


def _where(url: str) -> str:
    """The URL without its query (which may carry a token): what an alert may show."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"
