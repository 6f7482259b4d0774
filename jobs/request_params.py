"""The Messages API parameters a job may carry beyond its prompt: ``tools``, ``tool_choice``,
``stop_sequences``, ``top_p``, ``top_k`` and ``thinking``. Each is checked here as the API
checks it, with one stable code and the field in ``detail``, so that a mistake answers ``400``
at submit instead of failing the job at the provider; what passes reaches the provider as given.

Client tools (``name``, ``description``, ``input_schema``) come back as ``tool_use`` blocks in
the job's ``output.content``; server tools (a ``type`` such as ``web_search_20250305``) are
passed through and billed by the provider."""

import re
from typing import Any

from api.errors import ValidationFailed

__all__ = ["PARAM_FIELDS", "validate_params"]

PARAM_FIELDS = ("tools", "tool_choice", "stop_sequences", "top_p", "top_k", "thinking")
MAX_TOOLS = 128
TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_STOP_SEQUENCES = 16
MAX_STOP_SEQUENCE_LENGTH = 256
MIN_THINKING_BUDGET = 1024
"""The API's smallest ``thinking.budget_tokens``."""
TOOL_CHOICE_TYPES = {"auto", "any", "tool", "none"}


def _fail(code: str, message: str, field: str) -> ValidationFailed:
    return ValidationFailed(message, code=code, detail={"field": field})


def _tools(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value or len(value) > MAX_TOOLS:
        raise _fail("invalid_tools", f"tools must be a list of 1 to {MAX_TOOLS} tools.", "tools")
    names: set[str] = set()
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _fail("invalid_tools", f"{where} must be an object.", where)
        name = tool.get("name")
        if not isinstance(name, str) or not TOOL_NAME_RE.fullmatch(name):
            raise _fail(
                "invalid_tools",
                f"{where}.name must be 1 to 64 letters, digits, '_' or '-'.",
                f"{where}.name",
            )
        if name in names:
            raise _fail("invalid_tools", f"{where}.name {name!r} is given twice.", f"{where}.name")
        names.add(name)
        kind = tool.get("type", "custom")
        if not isinstance(kind, str) or not kind:
            raise _fail("invalid_tools", f"{where}.type must be a string.", f"{where}.type")
        if kind != "custom":
            continue  # a server tool: its own fields, checked by the provider
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise _fail(
                "invalid_tools",
                f'{where}.input_schema must be a JSON Schema object with "type": "object".',
                f"{where}.input_schema",
            )
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise _fail(
                "invalid_tools", f"{where}.description must be a string.", f"{where}.description"
            )
        extra = set(tool) - {"name", "description", "input_schema", "type", "cache_control"}
        if extra:
            raise _fail(
                "invalid_tools",
                f"{where} has unknown fields: {', '.join(sorted(extra))}.",
                where,
            )
    return value


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    if not isinstance(value, dict) or value.get("type") not in TOOL_CHOICE_TYPES:
        raise _fail(
            "invalid_tool_choice",
            'tool_choice must be {"type": "auto" | "any" | "none"} or '
            '{"type": "tool", "name": ...}.',
            "tool_choice",
        )
    if set(value) - {"type", "name", "disable_parallel_tool_use"}:
        raise _fail("invalid_tool_choice", "tool_choice has unknown fields.", "tool_choice")
    parallel = value.get("disable_parallel_tool_use")
    if parallel is not None and not isinstance(parallel, bool):
        raise _fail(
            "invalid_tool_choice",
            "tool_choice.disable_parallel_tool_use must be true or false.",
            "tool_choice",
        )
    if value["type"] != "none" and not tools:
        raise _fail("invalid_tool_choice", "tool_choice needs tools.", "tool_choice")
    if value["type"] == "tool":
        names = {tool["name"] for tool in tools or []}
        if value.get("name") not in names:
            raise _fail(
                "invalid_tool_choice",
                "tool_choice.name must name one of the job's tools.",
                "tool_choice.name",
            )
    elif "name" in value:
        raise _fail(
            "invalid_tool_choice", "tool_choice.name goes only with type 'tool'.", "tool_choice"
        )
    return value


def _stop_sequences(value: Any) -> list[str]:
    if (
        not isinstance(value, list)
        or len(value) > MAX_STOP_SEQUENCES
        or not all(
            isinstance(s, str) and s.strip() and len(s) <= MAX_STOP_SEQUENCE_LENGTH for s in value
        )
    ):
        raise _fail(
            "invalid_stop_sequences",
            f"stop_sequences must be a list of at most {MAX_STOP_SEQUENCES} non-blank strings of "
            f"at most {MAX_STOP_SEQUENCE_LENGTH} characters.",
            "stop_sequences",
        )
    return value


def _number(value: Any, *, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise _fail(
            f"invalid_{field}", f"{field} must be a number between {low:g} and {high:g}.", field
        )
    return float(value)


def _thinking(value: Any, max_tokens: int) -> dict[str, Any]:
    if isinstance(value, dict) and value == {"type": "disabled"}:
        return value
    budget = value.get("budget_tokens") if isinstance(value, dict) else None
    if (
        not isinstance(value, dict)
        or value.get("type") != "enabled"
        or set(value) != {"type", "budget_tokens"}
        or isinstance(budget, bool)
        or not isinstance(budget, int)
    ):
        raise _fail(
            "invalid_thinking",
            'thinking must be {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}.',
            "thinking",
        )
    if not MIN_THINKING_BUDGET <= budget < max_tokens:
        raise _fail(
            "invalid_thinking",
            f"thinking.budget_tokens must be at least {MIN_THINKING_BUDGET} and below max_tokens "
            f"({max_tokens}).",
            "thinking.budget_tokens",
        )
    return value


def validate_params(
    data: dict[str, Any], *, max_tokens: int, temperature: float | None
) -> dict[str, Any]:
    """The parameters ``data`` gives (only those), checked; raises ``ValidationFailed``."""
    params: dict[str, Any] = {}
    tools = None
    if data.get("tools") is not None:
        tools = params["tools"] = _tools(data["tools"])
    if data.get("tool_choice") is not None:
        params["tool_choice"] = _tool_choice(data["tool_choice"], tools)
    if data.get("stop_sequences") is not None:
        params["stop_sequences"] = _stop_sequences(data["stop_sequences"])
    if data.get("top_p") is not None:
        params["top_p"] = _number(data["top_p"], field="top_p", low=0, high=1)
    if data.get("top_k") is not None:
        top_k = data["top_k"]
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 1000:
            raise _fail("invalid_top_k", "top_k must be an integer between 1 and 1000.", "top_k")
        params["top_k"] = top_k
    if data.get("thinking") is not None:
        params["thinking"] = _thinking(data["thinking"], max_tokens)
        if params["thinking"]["type"] == "enabled":
            # As the API requires of a call that thinks.
            if temperature not in (None, 1.0):
                raise _fail(
                    "invalid_thinking",
                    "temperature may only be 1 (or unset) when thinking is enabled.",
                    "temperature",
                )
            if "top_k" in params:
                raise _fail(
                    "invalid_thinking", "top_k may not be set when thinking is enabled.", "top_k"
                )
            if params.get("top_p", 1.0) < 0.95:
                raise _fail(
                    "invalid_thinking",
                    "top_p must be between 0.95 and 1 when thinking is enabled.",
                    "top_p",
                )
            if params.get("tool_choice", {}).get("type") in ("any", "tool"):
                raise _fail(
                    "invalid_thinking",
                    "tool_choice may only be auto or none when thinking is enabled.",
                    "tool_choice",
                )
    return params
