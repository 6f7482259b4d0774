"""``manage.py llm_mcp add NAME --url URL [--bearer-env VAR] [--tools a,b] [--approval c,d]``,
``llm_mcp list``, ``llm_mcp refresh NAME`` and ``llm_mcp remove NAME``: the MCP servers whose
tools agent runs may call, as ``<NAME>__<tool>``."""

from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from api.errors import ApplicationError
from mcp_tools.models import MCPServer
from mcp_tools.registry import SEPARATOR, offered_tools
from mcp_tools.services import (
    MCPServerFields,
    mcp_server_refresh,
    mcp_server_remove,
    mcp_server_save,
)


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _price(text: str | None) -> Decimal | None:
    if text is None:
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        raise CommandError(f"--price: {text!r} is not an amount in USD") from None


class Command(BaseCommand):
    help = "Register an MCP server (add of an existing NAME changes it), list, refresh, remove."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="Register a server and list its tools.")
        add.add_argument("name", metavar="NAME", help="A slug; its tools are NAME__<tool>.")
        add.add_argument("--url", required=True, help="Its Streamable HTTP endpoint (…/mcp).")
        add.add_argument(
            "--bearer-env",
            default="",
            metavar="VAR",
            help="The NAME of the variable holding its bearer token (never the token).",
        )
        add.add_argument("--oauth-token-url", default="", metavar="URL")
        add.add_argument("--oauth-client-id", default="", metavar="ID")
        add.add_argument(
            "--oauth-secret-env",
            default="",
            metavar="VAR",
            help="The NAME of the variable holding the OAuth client secret.",
        )
        add.add_argument("--oauth-scope", default="", metavar="SCOPE")
        add.add_argument("--timeout", type=float, default=30.0, help="Seconds per call (30).")
        add.add_argument("--tools", default="", metavar="a,b", help="Offer only these tools.")
        add.add_argument(
            "--approval", default="", metavar="c,d", help="Tools whose calls wait for a person."
        )
        add.add_argument("--price", default=None, metavar="USD", help="Booked for each call.")
        add.add_argument("--disabled", action="store_true", help="Offer none of its tools.")
        actions.add_parser("list", help="The servers and the tools each offers.")
        for verb, what in (
            ("refresh", "List its tools again (and their input schemas)."),
            ("remove", "Unregister it: its tools are no longer offered."),
        ):
            action = actions.add_parser(verb, help=what)
            action.add_argument("name", metavar="NAME")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            return self._list()
        try:
            if action == "add":
                server, created, skipped = mcp_server_save(
                    name=options["name"], fields=self._fields(options)
                )
                self.stdout.write(f"{'added' if created else 'updated'} MCP server {server.name}")
            elif action == "refresh":
                server, skipped = mcp_server_refresh(name=options["name"])
                self.stdout.write(f"refreshed MCP server {server.name}")
            else:
                mcp_server_remove(name=options["name"])
                self.stdout.write(f"removed MCP server {options['name']}")
                return None
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self._tools(server)
        for reason in skipped:
            self.stdout.write(f"  left out: {reason}")
        return None

    def _fields(self, options: dict[str, Any]) -> MCPServerFields:
        oauth = bool(options["oauth_token_url"] or options["oauth_client_id"])
        auth = MCPServer.Auth.OAUTH if oauth else MCPServer.Auth.NONE
        if options["bearer_env"]:
            auth = MCPServer.Auth.BEARER
        return MCPServerFields(
            url=options["url"],
            auth=auth,
            bearer_env=options["bearer_env"],
            oauth_token_url=options["oauth_token_url"],
            oauth_client_id=options["oauth_client_id"],
            oauth_secret_env=options["oauth_secret_env"],
            oauth_scope=options["oauth_scope"],
            timeout_seconds=options["timeout"],
            enabled=not options["disabled"],
            allowed_tools=_names(options["tools"]),
            approval_tools=_names(options["approval"]),
            price_per_call_usd=_price(options["price"]),
        )

    def _tools(self, server: MCPServer) -> None:
        approval = set(server.approval_tools or [])
        for tool in offered_tools(server):
            waits = "  (waits for approval)" if tool["name"] in approval else ""
            self.stdout.write(f"  {server.name}{SEPARATOR}{tool['name']}{waits}")
            self.stdout.write(f"    {tool.get('description') or '-'}")
            properties = tool["input_schema"].get("properties") or {}
            required = set(tool["input_schema"].get("required") or [])
            for name, schema in properties.items():
                kind = schema.get("type", "any") if isinstance(schema, dict) else "any"
                self.stdout.write(
                    f"    - {name}: {kind}{' (required)' if name in required else ''}"
                )

    def _list(self) -> None:
        servers = list(MCPServer.objects.order_by("name"))
        if not servers:
            self.stdout.write("no MCP server is registered")
        for server in servers:
            auth = {
                MCPServer.Auth.BEARER: f"bearer from {server.bearer_env}",
                MCPServer.Auth.OAUTH: f"oauth, secret from {server.oauth_secret_env}",
            }.get(server.auth, "no auth")  # type: ignore[call-overload]
            state = "enabled" if server.enabled else "disabled"
            failing = f", {server.consecutive_failures} failed calls in a row" * bool(
                server.consecutive_failures
            )
            self.stdout.write(f"{server.name}  {server.url}  {auth}  {state}{failing}")
            self._tools(server)
