"""Request validation, deterministic replies, usage with prompt caching, and error bodies.

Tokens are estimated as ceil(len(text) / 4) per content block (non-text blocks: their JSON).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import Any

from .message_requests import (
    ApiError,
    MessagesRequest,
    error_body,
    new_request_id,
    parse_request,
    should_retry,
    token_count,
)
from .state import DEFAULT_CACHE_TTL, FakeProviderState

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
    "stream_seconds",
]


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


# --- the answer -------------------------------------------------------------------------------


LONG_REPLY = re.compile(r"fake_output_tokens=(\d{1,7})")
"""In the last user message, asks for a reply of that many output tokens (a long generation:
``max_tokens`` still cuts it, with ``stop_reason`` max_tokens)."""


STREAM_SECONDS = re.compile(r"fake_stream_seconds=(\d{1,4})")
"""In the last user message, asks for the answer's text to stream over about that many seconds
(streaming.py): a call that lasts long enough to watch or to cancel."""


def stream_seconds(request: MessagesRequest) -> float | None:
    """How long the request asks its stream to last (``fake_stream_seconds=``), if it does."""
    asked = STREAM_SECONDS.search(request.last_user_text)
    return float(asked.group(1)) if asked and int(asked.group(1)) > 0 else None


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
        budget -= token_count(thought)
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
    if token_count(text) > budget:
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
        token_count(
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
