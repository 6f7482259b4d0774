"""What the fake Messages API accepts: a request parsed and checked as the real API checks it
(``parse_request``), and the errors it answers with, in the API's own shape."""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .state import CACHE_TTLS, DEFAULT_CACHE_TTL, Price, price_for

__all__ = [
    "ERROR_TYPES",
    "MAX_CACHE_CONTROL_BLOCKS",
    "ApiError",
    "MessagesRequest",
    "Segment",
    "error_body",
    "new_request_id",
    "parse_request",
    "should_retry",
    "token_count",
]

MAX_CACHE_CONTROL_BLOCKS = 4

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "api_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, details: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.details = status, message, details

    @property
    def type(self) -> str:
        return ERROR_TYPES.get(self.status, "api_error")


def new_request_id() -> str:
    return "req_" + uuid.uuid4().hex[:24]


def error_body(error: ApiError, request_id: str) -> dict[str, Any]:
    inner: dict[str, Any] = {"type": error.type, "message": error.message}
    if error.details:
        inner["details"] = error.details
    return {"type": "error", "error": inner, "request_id": request_id}


def should_retry(error: ApiError) -> bool:
    """What x-should-retry says: 408/409/429/5xx, except a spend limit."""
    if error.details and error.details.get("error_code") == "enforced_spend_limit_reached":
        return False
    return error.status in (408, 409, 429) or error.status >= 500


# --- validation -------------------------------------------------------------------------------


@dataclass
class Segment:
    """One content block of the prompt in cache order: system blocks, then message blocks."""

    identity: str
    tokens: int
    ttl: str | None  # the ttl of its cache_control marker, if it carries one


@dataclass
class MessagesRequest:
    model: str
    price: Price
    max_tokens: int
    segments: list[Segment]
    digest: bytes
    last_user_text: str
    stream: bool = False
    options: dict[str, Any] | None = None
    """tools, tool_choice, thinking, stop_sequences as sent (what shapes the answer)."""
    assistant_turns: int = 0
    """How many assistant messages the request holds: the turn of a tool-use script."""
    tool_results: list[str] | None = None
    """The text of each tool_result block of the last user message, in order."""
    tool_script: list[Any] | None = None
    """The ``fake_tool_script=`` the system prompt or first user message carries, if any."""


def _invalid(message: str) -> ApiError:
    return ApiError(400, message)


def token_count(text: str) -> int:
    return math.ceil(len(text) / 4)


def _segment(block: Any, where: str, role: str, counter: list[int]) -> Segment:
    if isinstance(block, str):
        return Segment(json.dumps([role, block]), token_count(block), None)
    if not isinstance(block, dict):
        raise _invalid(f"{where}: Input should be a valid dictionary")
    kind = block.get("type")
    if not isinstance(kind, str):
        raise _invalid(f"{where}.type: Field required")
    if kind == "text" and not isinstance(block.get("text"), str):
        raise _invalid(
            f"{where}.text: Field required"
            if "text" not in block
            else f"{where}.text: Input should be a valid string"
        )
    ttl = None
    marker = block.get("cache_control")
    if marker is not None:
        if not isinstance(marker, dict) or marker.get("type") != "ephemeral":
            raise _invalid(f"{where}.cache_control.type: Input should be 'ephemeral'")
        ttl = marker.get("ttl", DEFAULT_CACHE_TTL)
        if ttl not in CACHE_TTLS:
            raise _invalid(f"{where}.cache_control.ephemeral.ttl: Input should be '5m' or '1h'")
        counter[0] += 1
    bare = {k: v for k, v in block.items() if k != "cache_control"}
    measured = bare["text"] if kind == "text" else json.dumps(bare, sort_keys=True)
    return Segment(json.dumps([role, bare], sort_keys=True), token_count(measured), ttl)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text")


def _tool_results_of(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    results = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            inner = block.get("content", "")
            text = inner if isinstance(inner, str) else _text_of(inner)
            results.append(("error: " if block.get("is_error") else "") + text)
    return results


TOOL_SCRIPT = "fake_tool_script="
"""Marks a tool-use script in the system prompt or the first user message (fake_provider/scripts.py
explains the format)."""


def _tool_script(content: Any) -> list[Any] | None:
    """The script after ``fake_tool_script=`` (a JSON list of turns), if the text carries one."""
    text = _text_of(content) if isinstance(content, (str, list)) else ""
    at = text.find(TOOL_SCRIPT)
    if at < 0:
        return None
    try:
        script, _end = json.JSONDecoder().raw_decode(text, at + len(TOOL_SCRIPT))
    except ValueError as exc:
        raise _invalid(f"{TOOL_SCRIPT}: not JSON ({exc})") from exc
    if not isinstance(script, list) or not all(_is_script_turn(turn) for turn in script):
        raise _invalid(
            f"{TOOL_SCRIPT}: a list of turns, each a final text or a list of "
            '{"name", "input"} tool calls'
        )
    return script


def _is_script_turn(turn: Any) -> bool:
    if isinstance(turn, str):
        return True
    return (
        isinstance(turn, list)
        and bool(turn)
        and all(
            isinstance(call, dict)
            and isinstance(call.get("name"), str)
            and isinstance(call.get("input", {}), dict)
            and set(call) <= {"name", "input"}
            for call in turn
        )
    )


def parse_request(
    payload: Any, prices: Callable[[str], Price | None] = price_for
) -> MessagesRequest:
    """Validates a Messages API body like Anthropic does; raises ApiError (400 / 404).
    ``prices``: the price list of the API asked (the OpenAI-compatible one has its own)."""
    if not isinstance(payload, dict):
        raise _invalid("Request body must be a JSON object")
    for name in ("model", "max_tokens", "messages"):
        if name not in payload:
            raise _invalid(f"{name}: Field required")
    model = payload["model"]
    if not isinstance(model, str) or not model:
        raise _invalid("model: Input should be a valid string")
    max_tokens = payload["max_tokens"]
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise _invalid("max_tokens: Input should be a valid integer")
    if max_tokens < 1:
        raise _invalid("max_tokens: Input should be greater than or equal to 1")
    messages = payload["messages"]
    if not isinstance(messages, list):
        raise _invalid("messages: Input should be a valid list")
    if not messages:
        raise _invalid("messages: at least one message is required")
    temperature = payload.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise _invalid("temperature: Input should be a valid number")
        if not 0 <= temperature <= 1:
            raise _invalid("temperature: Input should be between 0 and 1")
    if payload.get("metadata") is not None and not isinstance(payload["metadata"], dict):
        raise _invalid("metadata: Input should be a valid dictionary")
    stream = payload.get("stream", False)
    if not isinstance(stream, bool):
        raise _invalid("stream: Input should be a valid boolean")

    counter = [0]
    segments: list[Segment] = []
    tools = payload.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _invalid("tools: Input should be a valid list")
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise _invalid(f"tools.{i}: Input should be a valid dictionary")
            segments.append(_segment({"type": "tool", **tool}, f"tools.{i}", "tools", counter))
    system = payload.get("system")
    if isinstance(system, str):
        segments.append(_segment(system, "system", "system", counter))
    elif isinstance(system, list):
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise _invalid(f"system.{i}.type: Input should be 'text'")
            segments.append(_segment(block, f"system.{i}", "system", counter))
    elif system is not None:
        raise _invalid("system: Input should be a valid string or list")

    last_user_text = ""
    assistant_turns = 0
    tool_results: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _invalid(f"messages.{i}: Input should be a valid dictionary")
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant"):
            raise _invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if "content" not in message:
            raise _invalid(f"messages.{i}.content: Field required")
        if isinstance(content, str):
            segments.append(_segment(content, f"messages.{i}.content", role, counter))
        elif isinstance(content, list):
            for j, block in enumerate(content):
                segments.append(_segment(block, f"messages.{i}.content.{j}", role, counter))
        else:
            raise _invalid(f"messages.{i}.content: Input should be a valid string or list")
        if role == "user":
            last_user_text = _text_of(content)
            tool_results = _tool_results_of(content)
        else:
            assistant_turns += 1
    if counter[0] > MAX_CACHE_CONTROL_BLOCKS:
        raise _invalid(
            f"A maximum of {MAX_CACHE_CONTROL_BLOCKS} blocks with cache_control may be provided. "
            f"Found {counter[0]}."
        )

    price = prices(model)
    if price is None:
        raise ApiError(404, f"model: {model}")
    if max_tokens > price.max_output_tokens:
        raise _invalid(
            f"max_tokens: {max_tokens} > {price.max_output_tokens}, which is the maximum allowed "
            f"number of output tokens for {model}"
        )
    canonical = json.dumps([system, messages], sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).digest()
    options = {
        name: payload[name]
        for name in ("tools", "tool_choice", "thinking", "stop_sequences")
        if payload.get(name) is not None
    }
    first = messages[0].get("content") if isinstance(messages[0], dict) else None
    script = _tool_script(system) or _tool_script(first)
    return MessagesRequest(
        model,
        price,
        max_tokens,
        segments,
        digest,
        last_user_text,
        stream,
        options,
        assistant_turns,
        tool_results,
        script,
    )
