"""Request validation, deterministic replies, usage with prompt caching, and error bodies.

Tokens are estimated as ceil(len(text) / 4) per content block (non-text blocks: their JSON).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .state import CACHE_TTLS, DEFAULT_CACHE_TTL, FakeProviderState, Price, price_for

__all__ = [
    "ApiError",
    "FAULT_ERRORS",
    "GARBAGE_BODY",
    "GARBAGE_CONTENT_TYPE",
    "MessagesRequest",
    "build_message",
    "error_body",
    "new_request_id",
    "parse_request",
    "should_retry",
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

# fault name -> (status, message, error.details)
FAULT_ERRORS: dict[str, tuple[int, str, dict[str, str] | None]] = {
    "400": (400, "Injected fault: the request was rejected as invalid.", None),
    "401": (401, "invalid x-api-key", None),
    "403": (403, "Your API key does not have permission to use the specified resource.", None),
    "404": (404, "The requested resource could not be found.", None),
    "409": (409, "Conflict: the request could not be completed. Please retry.", None),
    "413": (413, "Request exceeds the maximum allowed number of bytes.", None),
    "429": (
        429,
        "This request would exceed the rate limit for your organization. Please try again later.",
        None,
    ),
    "500": (500, "Internal server error", None),
    "502": (502, "Bad gateway", None),
    "503": (503, "Service unavailable", None),
    "504": (504, "Request timed out", None),
    "529": (529, "Overloaded", None),
    "context": (400, "prompt is too long: 210000 tokens > 200000 maximum", None),
    "usagelimit": (
        400,
        "You have reached your specified API usage limits. "
        "You will regain access on 2026-12-01 at 00:00 UTC.",
        None,
    ),
    "spendcap": (
        429,
        "You have reached your workspace's enforced spend limit.",
        {"error_code": "enforced_spend_limit_reached"},
    ),
    # Account-wide, like a revoked key: no request of the account succeeds until credits are
    # bought. Anthropic answers it as a plain 400.
    "credit": (
        400,
        "Your credit balance is too low to access the Anthropic API. "
        "Please go to Plans & Billing to upgrade or purchase credits.",
        None,
    ),
}

GARBAGE_BODY = b"<html>upstream proxy error</html>"
"""The ``garbage`` fault's answer: a 200 whose body is not JSON (a proxy's error page). The
message was generated and billed before the body was mangled on the way back."""
GARBAGE_CONTENT_TYPE = "text/html; charset=utf-8"

_VOCABULARY = (
    "alpha bravo cache delta echo fake golden harbor index jitter kernel ledger metric node orbit "
    "packet queue retry signal token upstream vector window yield zone"
).split()


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


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _segment(block: Any, where: str, role: str, counter: list[int]) -> Segment:
    if isinstance(block, str):
        return Segment(json.dumps([role, block]), _tokens(block), None)
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
    return Segment(json.dumps([role, bare], sort_keys=True), _tokens(measured), ttl)


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


# --- the answer -------------------------------------------------------------------------------


LONG_REPLY = re.compile(r"fake_output_tokens=(\d{1,7})")
"""In the last user message, asks for a reply of that many output tokens (a long generation:
``max_tokens`` still cuts it, with ``stop_reason`` max_tokens)."""


def _natural_reply(request: MessagesRequest) -> str:
    snippet = " ".join(request.last_user_text.split())[:60]
    words: list[str] = []
    seed = request.digest
    count = 6 + seed[0] % 40
    asked = LONG_REPLY.search(request.last_user_text)
    if asked:
        return _long_reply(int(asked.group(1)), seed)
    while len(words) < count:
        seed = hashlib.sha256(seed).digest()
        words.extend(_VOCABULARY[b % len(_VOCABULARY)] for b in seed[: count - len(words)])
    return f"Fake reply to: {snippet}. " + " ".join(words) + "."


def _long_reply(tokens: int, seed: bytes) -> str:
    """About ``tokens`` output tokens (4 characters each) of the vocabulary."""
    words: list[str] = []
    length = 0
    while length < tokens * 4:
        seed = hashlib.sha256(seed).digest()
        for b in seed:
            word = _VOCABULARY[b % len(_VOCABULARY)]
            words.append(word)
            length += len(word) + 1
    return " ".join(words)[: tokens * 4]


def _usage(request: MessagesRequest, state: FakeProviderState) -> dict[str, Any]:
    """Input tokens by kind. Like the API, a request may carry several breakpoints: the longest
    prefix ending at one of them that is cached is read, the rest up to the last breakpoint is
    written (and each breakpoint's prefix is cached from then on)."""
    total = sum(s.tokens for s in request.segments)
    split = {"5m": 0, "1h": 0}
    created = read = 0
    marked = [i for i, s in enumerate(request.segments) if s.ttl]
    if marked:
        hits = []
        for at in marked:
            prefix = request.segments[: at + 1]
            prefix_tokens = sum(s.tokens for s in prefix)
            if prefix_tokens < 1:
                continue
            key = hashlib.sha256("\n".join(s.identity for s in prefix).encode()).hexdigest()
            ttl = prefix[-1].ttl or DEFAULT_CACHE_TTL
            hits.append((prefix_tokens, ttl, state.cache_hit(request.model, key, ttl)))
        if hits:
            read = max((tokens for tokens, _, hit in hits if hit), default=0)
            last_tokens, last_ttl, _ = hits[-1]
            created = split[last_ttl] = last_tokens - read
    return {
        "input_tokens": max(1, total - created - read),
        "cache_creation_input_tokens": created,
        "cache_read_input_tokens": read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": split["5m"],
            "ephemeral_1h_input_tokens": split["1h"],
        },
    }


def _tool_to_call(request: MessagesRequest) -> dict[str, Any] | None:
    """The client tool the answer calls: the one ``tool_choice`` names, any tool when it says
    ``any``, else a tool whose name the last user message mentions; None: a text answer."""
    options = request.options or {}
    tools = [t for t in options.get("tools", []) if t.get("type", "custom") == "custom"]
    choice = options.get("tool_choice") or {"type": "auto"}
    if not tools or choice.get("type") == "none":
        return None
    if choice.get("type") == "tool":
        return next((t for t in tools if t.get("name") == choice.get("name")), None)
    if choice.get("type") == "any":
        return tools[0]
    return next((t for t in tools if t.get("name") and t["name"] in request.last_user_text), None)


def _web_search_tool(request: MessagesRequest) -> dict[str, Any] | None:
    """The web search server tool, when the job offers it and its last user message asks to
    search."""
    options = request.options or {}
    for tool in options.get("tools", []):
        if str(tool.get("type", "")).startswith("web_search") and (
            "search" in request.last_user_text.lower()
        ):
            return dict(tool)
    return None


def _tool_input(tool: dict[str, Any]) -> dict[str, Any]:
    """An input that fits the tool's schema: each required property, by its type."""
    schema = tool.get("input_schema") or {}
    samples = {"integer": 7, "number": 7.5, "boolean": True, "array": [], "object": {}}
    properties = schema.get("properties") or {}
    return {
        name: samples.get((properties.get(name) or {}).get("type", "string"), "fake")
        for name in schema.get("required") or []
    }


def _scripted_calls(request: MessagesRequest) -> list[dict[str, Any]] | str | None:
    """This turn's entry of the request's tool script: tool calls, a final text, or None (no
    script, or the script is over: a text answer)."""
    script = request.tool_script
    if not script or request.assistant_turns >= len(script):
        return None
    turn: list[dict[str, Any]] | str = script[request.assistant_turns]
    return turn


def build_message(request: MessagesRequest, state: FakeProviderState) -> dict[str, Any]:
    """The full Messages API response (also touches the prompt-cache memory): a thinking block
    first when thinking is enabled, then the text, or a tool call (stop_reason tool_use)."""
    options = request.options or {}
    content: list[dict[str, Any]] = []
    budget = request.max_tokens
    thinking = options.get("thinking") or {}
    if thinking.get("type") == "enabled":
        thought = ("Considering the request step by step. " * 8).strip()
        content.append(
            {
                "type": "thinking",
                "thinking": thought,
                "signature": "fake-" + request.digest.hex()[:32],
            }
        )
        budget -= _tokens(thought)
    text = _natural_reply(request)
    turn = _scripted_calls(request)
    scripted = turn if isinstance(turn, list) else None
    if isinstance(turn, str):
        text = turn  # the script's final answer
    elif request.tool_results and not scripted:
        # An answer to tool results: deterministic, from the results themselves.
        text = "Results: " + "; ".join(r[:200] for r in request.tool_results)
    stop_reason, stop_sequence = "end_turn", None
    for sequence in options.get("stop_sequences", []):
        at = text.find(sequence) if isinstance(sequence, str) and sequence else -1
        if at >= 0:
            text, stop_reason, stop_sequence = text[:at], "stop_sequence", sequence
    if _tokens(text) > budget:
        text, stop_reason, stop_sequence = text[: max(0, budget) * 4], "max_tokens", None
    # A scripted turn, or an answer to tool results, calls no tool of its own choosing.
    chosen = turn is None and not request.tool_results
    tool = _tool_to_call(request) if stop_reason == "end_turn" and chosen else None
    searches = 0
    search_tool = _web_search_tool(request)
    if search_tool is not None and tool is None:
        # The server tool runs on the provider's side: its call and its results come back as
        # blocks of the answer, and each search is billed (usage.server_tool_use).
        searches = 1
        call_id = "srvtoolu_" + hashlib.sha256(request.digest).hexdigest()[:24]
        content.append(
            {
                "type": "server_tool_use",
                "id": call_id,
                "name": "web_search",
                "input": {"query": request.last_user_text[:100]},
            }
        )
        content.append(
            {
                "type": "web_search_tool_result",
                "tool_use_id": call_id,
                "content": [
                    {
                        "type": "web_search_result",
                        "url": "https://example.invalid/fake-result",
                        "title": "A fake search result",
                        "encrypted_content": "fake-" + request.digest.hex()[:32],
                        "page_age": None,
                    }
                ],
            }
        )
    if scripted:
        names = ", ".join(call["name"] for call in scripted)
        content.append({"type": "text", "text": f"I will call {names}."})
        for i, call in enumerate(scripted):
            seed = request.digest + i.to_bytes(2, "big")
            content.append(
                {
                    "type": "tool_use",
                    "id": "toolu_" + hashlib.sha256(seed).hexdigest()[:24],
                    "name": call["name"],
                    "input": call.get("input", {}),
                }
            )
        stop_reason, stop_sequence = "tool_use", None
    elif tool is not None:
        text = f"I will call {tool['name']}."
        content.append({"type": "text", "text": text})
        content.append(
            {
                "type": "tool_use",
                "id": "toolu_" + hashlib.sha256(request.digest).hexdigest()[:24],
                "name": tool["name"],
                "input": _tool_input(tool),
            }
        )
        stop_reason = "tool_use"
    else:
        content.append({"type": "text", "text": text})
    output_tokens = sum(
        _tokens(
            json.dumps(block["input"])
            if block["type"] == "tool_use"
            else block.get("text", block.get("thinking", ""))
        )
        for block in content
    )
    usage = _usage(request, state)
    usage_out = {
        "input_tokens": usage["input_tokens"],
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
        "cache_read_input_tokens": usage["cache_read_input_tokens"],
        "cache_creation": usage["cache_creation"],
    }
    if searches:
        usage_out["server_tool_use"] = {"web_search_requests": searches}
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_out,
    }
