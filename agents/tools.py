"""The agent tool registry: plain Python functions registered with ``@agent_tool``.

Modules named in ``LLM_AGENT_TOOL_MODULES`` and every installed app's ``agent_tools.py`` are
imported once per process (``AgentsConfig.ready``, web and workers alike); a module that fails
to import, or a tool whose definition is wrong, is a system check error (agents/checks.py) that
stops every manage.py command, ``rqworker`` included.

A tool is called with its input's fields as keyword arguments, plus ``call_id`` (the model's
``tool_use`` id, the same on every retry) when it accepts one; it returns a string or any JSON
value. Each call runs in a child process of its own, killed at the tool's timeout
(agents/tool_processes.py): a call that timed out is no longer running. A tool whose side effect
must happen once keys it on ``call_id`` (the demo ``send_email`` does). ``tool_call`` turns
everything that can go wrong (``ToolError``, any other exception, input that fails the schema,
an unknown tool, a timeout) into an error result: the run goes on.

Other apps add tools that are not Python functions through ``tool_source_register`` (an MCP
server's tools, mcp_tools/): looked up after the Python ones, called the same way, by the same
step machinery. How to write one: docs/agents.md.
"""

import importlib
import inspect
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol, TypeVar

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agents.fork_server import ForkServer, fork_server, fork_server_start
from agents.tool_processes import call_in_child
from api.did_you_mean import nearest_name

__all__ = [
    "AgentTool",
    "ToolError",
    "ToolOutcome",
    "ToolSource",
    "agent_tool",
    "registered_tool",
    "registered_tools",
    "tool_call",
    "tool_load_problems",
    "tool_source_register",
    "tool_fork_server_start",
    "tools_load",
    "unknown_tool_message",
]

logger = logging.getLogger(__name__)

TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""The Messages API's rule for a tool name."""
SOURCE_SEPARATOR = "__"
"""Between a tool source's name and its tool's (an MCP server's: ``<server>__<tool>``). No
Python tool may hold it: Python tools are looked up first, so one named ``crm__delete`` would
silently take the place of the ``crm`` server's ``delete``."""
MAX_RESULT_CHARS = 100_000
"""A tool result longer than this is cut (it goes into every later turn's prompt)."""

F = TypeVar("F", bound=Callable[..., Any])


class ToolError(Exception):
    """Raised by a tool to give the model an error result with this message. ``billable=False``
    says the call never reached what it calls (a priced tool's call is then not booked)."""

    def __init__(self, message: str = "", *, billable: bool = True) -> None:
        super().__init__(message)
        self.billable = billable


class ToolDefinitionError(ValueError):
    """A tool registered with a wrong name, schema or timeout (a programming error)."""


@dataclass(frozen=True)
class AgentTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    function: Callable[..., Any] = field(compare=False)
    requires_approval: bool = False
    timeout: float = 60.0
    accepts_call_id: bool = False
    source: str = "python"
    """Where it comes from: ``python`` (``@agent_tool``) or ``mcp:<server>`` (mcp_tools/)."""
    takes_arguments: bool = False
    """Called as ``function(arguments=<the input>, call_id=...)``, its input passed on whole (an
    MCP tool: its own argument named ``call_id`` must not meet ours)."""
    price_usd: Decimal | None = None
    """Booked in the ledger for each call that reached it (agents/services.py)."""

    def definition(self) -> dict[str, Any]:
        """What the model is told (a job's ``params.tools`` entry)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


@dataclass(frozen=True)
class ToolOutcome:
    """What a call gives back to the model: the ``tool_result`` content and whether it failed."""

    output: str
    is_error: bool
    stopped: bool = False
    """Stopped at the tool's timeout: the call no longer runs."""
    billable: bool = True
    """False: the call never reached the tool (unknown, refused input, ``ToolError(billable=
    False)``); a priced tool's call is booked otherwise, an unknown outcome included."""


class ToolSource(Protocol):
    """Tools that are not Python functions of this process (mcp_tools/registry.py)."""

    def tool(self, name: str) -> AgentTool | None: ...

    def tools(self) -> dict[str, AgentTool]: ...


_registry: dict[str, AgentTool] = {}
_sources: list[ToolSource] = []
_load_problems: list[str] = []
_loaded = False


def tool_source_register(source: ToolSource) -> None:
    """Add a source of tools; call it from an ``AppConfig.ready``. A Python tool of the same
    name comes first."""
    if source not in _sources:
        _sources.append(source)


def agent_tool(
    description: str,
    input_schema: dict[str, Any],
    name: str | None = None,
    requires_approval: bool = False,
    timeout: float = 60,
) -> Callable[[F], F]:
    """Register the decorated function as a tool under its name (or ``name``)."""

    def register(function: F) -> F:
        tool_name = name or function.__name__
        where = f"{function.__module__}.{function.__qualname__}"
        if not TOOL_NAME_RE.fullmatch(tool_name):
            raise ToolDefinitionError(f"{where}: tool name {tool_name!r} must match {TOOL_NAME_RE}")
        if SOURCE_SEPARATOR in tool_name:
            raise ToolDefinitionError(
                f"{where}: tool name {tool_name!r} holds {SOURCE_SEPARATOR!r}, which is kept for "
                f"MCP tools (<server>{SOURCE_SEPARATOR}<tool>)"
            )
        if not isinstance(description, str) or not description.strip():
            raise ToolDefinitionError(f"{where}: a tool needs a description")
        if not isinstance(input_schema, dict) or input_schema.get("type") != "object":
            raise ToolDefinitionError(f'{where}: input_schema must have "type": "object"')
        try:
            Draft202012Validator.check_schema(input_schema)
        except SchemaError as exc:
            raise ToolDefinitionError(f"{where}: input_schema is not valid: {exc.message}") from exc
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ToolDefinitionError(f"{where}: timeout must be a positive number of seconds")
        existing = _registry.get(tool_name)
        if existing is not None and existing.function is not function:
            same = (existing.function.__module__, existing.function.__qualname__) == (
                function.__module__,
                function.__qualname__,
            )
            if not same:  # a module imported twice (tests reload) registers the same function
                raise ToolDefinitionError(f"{where}: a tool named {tool_name!r} already exists")
        parameters = inspect.signature(function).parameters
        accepts_call_id = "call_id" in parameters or any(
            p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters.values()
        )
        _registry[tool_name] = AgentTool(
            name=tool_name,
            description=description.strip(),
            input_schema=input_schema,
            function=function,
            requires_approval=requires_approval,
            timeout=float(timeout),
            accepts_call_id=accepts_call_id,
        )
        return function

    return register


def tools_load(*, modules: list[str], app_modules: list[str]) -> list[str]:
    """Import the tool modules: each named one (must exist) and each app's ``agent_tools``
    (optional). Returns the problems found, also kept for the system check."""
    global _loaded
    problems: list[str] = []
    for module, required in [(m, True) for m in modules] + [(m, False) for m in app_modules]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if required or exc.name != module:
                problems.append(f"agent tool module {module!r} cannot be imported: {exc}")
        except Exception as exc:  # a tool module's own error: reported, the process stops
            problems.append(f"agent tool module {module!r} failed to import: {exc!r}")
    _load_problems[:] = problems
    _loaded = True
    for problem in problems:
        logger.error("%s", problem)
    return problems


def tool_load_problems() -> list[str]:
    return list(_load_problems)


def registered_tool(name: str) -> AgentTool | None:
    """The tool a run may name ``name``: a Python one, else one of a source's."""
    tool = _registry.get(name)
    if tool is not None:
        return tool
    for source in _sources:
        tool = source.tool(name)
        if tool is not None:
            return tool
    return None


def registered_tools() -> dict[str, AgentTool]:
    """Every tool a run may name, by name (no Python tool can hold a source's name)."""
    tools: dict[str, AgentTool] = {}
    for source in reversed(_sources):
        tools.update(source.tools())
    tools.update(_registry)
    return tools


def unknown_tool_message(name: str) -> tuple[str, list[str], str | None]:
    """What an unknown tool's refusal says: the message, the tools there are, the nearest."""
    known = sorted(registered_tools())
    near = nearest_name(name, known)
    message = f"No tool named {name!r} is registered."
    if near:
        message += f" Did you mean {near!r}?"
    elif known:
        message += f" Tools: {', '.join(known)}."
    return message, known, near


def _as_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text[:MAX_RESULT_CHARS]


def tool_call(*, name: str, tool_input: Any, call_id: str) -> ToolOutcome:
    """Run one tool call in a child process of its own to its end, or stop it at its timeout;
    never raises."""
    tool = registered_tool(name)
    if tool is None:
        return ToolOutcome(f"Unknown tool: {name}", True, billable=False)
    if not isinstance(tool_input, dict):
        return ToolOutcome("Invalid input: the input must be a JSON object", True, billable=False)
    problems = sorted(
        Draft202012Validator(tool.input_schema).iter_errors(tool_input), key=lambda e: e.path
    )
    if problems:
        first = problems[0]
        where = "/".join(str(p) for p in first.path) or "(input)"
        return ToolOutcome(f"Invalid input at {where}: {first.message}", True, billable=False)
    if tool.takes_arguments:
        kwargs: dict[str, Any] = {"arguments": dict(tool_input), "call_id": call_id}
    else:
        kwargs = dict(tool_input)
        if tool.accepts_call_id:
            kwargs["call_id"] = call_id
    server = fork_server() if _served.get(name) is tool else None
    ended = call_in_child(
        lambda: _answer(tool, kwargs), timeout=tool.timeout, server=server, served=(name, kwargs)
    )
    if ended.timed_out:
        return ToolOutcome(
            f"Timed out after {tool.timeout:g} s: the call was stopped and is no longer running",
            True,
            stopped=True,
        )
    if ended.answer is None:
        logger.warning("agent tool %s ended without a result (%s)", name, ended.how)
        return ToolOutcome(f"The tool's process ended without a result ({ended.how})", True)
    if ended.answer.get("raised"):
        logger.warning("agent tool %s raised %s", name, ended.answer["raised"])
    return ToolOutcome(
        ended.answer["output"], ended.answer["is_error"], billable=ended.answer["billable"]
    )


def _answer(tool: AgentTool, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Call the tool (in the call's child process) and say what goes back to the model."""
    try:
        value = tool.function(**kwargs)
    except ToolError as error:
        return {"output": str(error) or "Tool error", "is_error": True, "billable": error.billable}
    except BaseException as error:  # noqa: BLE001 (a tool's failure is the model's to see)
        return {
            "output": f"{type(error).__name__}: {error}",
            "is_error": True,
            "billable": True,
            "raised": repr(error),
        }
    try:
        return {"output": _as_text(value), "is_error": False, "billable": True}
    except (TypeError, ValueError) as exc:
        return {
            "output": f"The tool's result is not JSON: {exc}",
            "is_error": True,
            "billable": True,
        }


_served: dict[str, AgentTool] = {}
"""The Python tools registered when this process started its fork server: the server's copy of
the process has these very objects, so it can run their calls by name."""


def tool_fork_server_start() -> ForkServer:
    """Start a fork server for this process's tool calls (the agents worker does, at its start):
    the calls of the Python tools registered now fork from it instead of from this process."""
    if not _served:  # the first server's: a server started again is a copy with the same
        _served.update(_registry)
    return fork_server_start(serve=_serve)


def _serve(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """In a child of the fork server: the call's answer."""
    return _answer(_served[name], kwargs)
