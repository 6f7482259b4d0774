"""An OpenAI Chat Completions or Embeddings request at the front door as a job's submit body
(docs/front-doors.md): the Messages format every job carries (jobs/validation.py checks the
rest). Pure: no database, no network.

The rules between the two formats are providers/openai_translate.py's, which translates a job for
an OpenAI-compatible provider: its tables (``TOOL_CHOICES``, ``image_block``) serve both ways,
so a rule is written once. The answers go back in gateway/openai_shapes.py."""

import json
from typing import Any

from gateway.errors import GatewayError
from gateway.headers import CallOptions
from providers.openai_translate import TOOL_CHOICES, image_block

__all__ = ["DEFAULT_MAX_TOKENS", "embedding_data", "job_data"]

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` of a chat request that gives none (the Chat Completions API makes it optional,
every job needs one: its worst case is what budgets reserve); lowered to the model's limit."""

IGNORED = frozenset(
    {"stream", "stream_options", "user", "seed", "store", "service_tier", "safety_identifier"}
)
"""Fields taken and not sent: the door's own (``stream``), and those that change nothing of the
answer's content."""
NEUTRAL = {
    "n": 1,
    "logprobs": False,
    "frequency_penalty": 0,
    "presence_penalty": 0,
}
"""Fields accepted only at their neutral value: llmops answers one choice without log
probabilities or penalties."""


def _bad(message: str, param: str, code: str = "invalid_request") -> GatewayError:
    return GatewayError(400, message, code=code, param=param)


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise _bad(f"{where}: only text parts are taken here.", where)
            parts.append(str(part.get("text") or ""))
        return "\n\n".join(parts)
    if content is None:
        return ""
    raise _bad(f"{where} must be a string or a list of parts.", where)


def _user_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _bad(f"{where} must be a string or a list of parts.", where)
    blocks = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "image_url":
            url = (part.get("image_url") or {}).get("url")
            if not isinstance(url, str):
                raise _bad(f"{where}[{j}].image_url.url must be a string.", f"{where}[{j}]")
            blocks.append(image_block(url))
        else:
            raise _bad(f"{where}[{j}]: a {kind!r} part is not supported.", f"{where}[{j}]")
    return blocks


def _assistant_blocks(message: dict[str, Any], where: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    text = _text(message.get("content"), f"{where}.content")
    if text:
        blocks.append({"type": "text", "text": text})
    for j, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise _bad(f"{where}.tool_calls[{j}] must be a function call.", f"{where}.tool_calls")
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            raise _bad(
                f"{where}.tool_calls[{j}].function.arguments must be a JSON object.",
                f"{where}.tool_calls",
            )
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id") or ""),
                "name": str(function.get("name") or ""),
                "input": arguments,
            }
        )
    return blocks


def _messages(value: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """(system, messages) of the chat ``messages``: system and developer messages become the
    system prompt, tool messages the user's ``tool_result`` blocks, turns of one role in a row
    one turn."""
    if not isinstance(value, list) or not value:
        raise _bad("messages must be a non-empty list.", "messages")
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _bad(f"{where} must be an object.", where)
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text(message.get("content"), f"{where}.content"))
            continue
        if role == "user":
            role, blocks = "user", _user_blocks(message.get("content"), f"{where}.content")
        elif role == "assistant":
            blocks = _assistant_blocks(message, where)
        elif role == "tool":
            role = "user"
            blocks = [
                {
                    "type": "tool_result",
                    "tool_use_id": str(message.get("tool_call_id") or ""),
                    "content": _text(message.get("content"), f"{where}.content"),
                }
            ]
        else:
            raise _bad(f"{where}.role {role!r} is not supported.", f"{where}.role")
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        # A turn of only text blocks (no tool results in it) reads best as its text.
        if all(block["type"] == "text" for block in turn["content"]):
            turn["content"] = "\n\n".join(block["text"] for block in turn["content"])
    return ("\n\n".join(system) or None), turns


def _tools(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _bad("tools must be a list.", "tools")
    tools = []
    for i, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not function:
            raise _bad(f"tools[{i}]: only function tools are supported.", f"tools[{i}]")
        converted = {
            "name": function.get("name"),
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
        }
        if function.get("description"):
            converted["description"] = function["description"]
        tools.append(converted)
    return tools


def _tool_choice(value: Any, parallel: Any) -> dict[str, Any] | None:
    back = {chat: messages for messages, chat in TOOL_CHOICES.items()}
    choice: dict[str, Any] | None = None
    if isinstance(value, str):
        if value not in back:
            raise _bad("tool_choice must be auto, none, required or a function.", "tool_choice")
        choice = {"type": back[value]}
    elif isinstance(value, dict):
        name = (value.get("function") or {}).get("name")
        if value.get("type") != "function" or not isinstance(name, str):
            raise _bad("tool_choice must name a function.", "tool_choice")
        choice = {"type": "tool", "name": name}
    elif value is not None:
        raise _bad("tool_choice must be a string or an object.", "tool_choice")
    if parallel is False:
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    return choice


def job_data(body: Any, options: CallOptions, *, max_output_tokens: int | None) -> dict[str, Any]:
    """The job submit body (jobs/validation.py) of a Chat Completions request: a real-time job
    of the call's feature, tags and deadline. ``max_output_tokens``: the model's limit (None for
    a model without a price: the submit refuses it)."""
    if not isinstance(body, dict):
        raise GatewayError(400, "The body must be a JSON object.", code="invalid_body")
    for name, neutral in NEUTRAL.items():
        if body.get(name) not in (None, neutral):
            raise _bad(f"{name} is not supported (only {json.dumps(neutral)}).", name)
    response_format = body.get("response_format")
    if response_format is not None and (
        not isinstance(response_format, dict) or response_format.get("type", "text") != "text"
    ):
        raise _bad("response_format: only text is supported.", "response_format")
    known = (
        IGNORED
        | set(NEUTRAL)
        | {
            "model",
            "messages",
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "top_p",
            "stop",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "metadata",
            "response_format",
        }
    )
    unknown = sorted(set(body) - known)
    if unknown:
        raise _bad(
            f"{', '.join(unknown)}: not supported by llmops's OpenAI front door "
            "(docs/front-doors.md#not-supported).",
            unknown[0],
            code="unknown_field",
        )
    system, messages = _messages(body.get("messages"))
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens is None:
        max_tokens = min(DEFAULT_MAX_TOKENS, max_output_tokens or DEFAULT_MAX_TOKENS)
    data: dict[str, Any] = {
        "model": body.get("model"),
        "messages": messages,
        "max_tokens": max_tokens,
        **options.job_fields(),
        "mode": "realtime",
    }
    if system:
        data["system"] = system
    temperature = body.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        if temperature > 1:
            raise _bad(
                "temperature must be between 0 and 1 here (every model's calls run as Messages "
                "API calls, whose range that is).",
                "temperature",
            )
    for name in ("temperature", "top_p", "metadata"):
        if body.get(name) is not None:
            data[name] = body[name]
    stop = body.get("stop")
    if stop is not None:
        data["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    if body.get("tools"):
        data["tools"] = _tools(body["tools"])
    choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if choice is not None and (data.get("tools") or choice["type"] == "none"):
        data["tool_choice"] = choice
    return data


def embedding_data(body: Any, options: CallOptions) -> tuple[dict[str, Any], str]:
    """The embeddings submit body (embeddings/validation.py) of an Embeddings API request, and
    the encoding its answer is asked in (``float`` or ``base64``)."""
    if not isinstance(body, dict):
        raise GatewayError(400, "The body must be a JSON object.", code="invalid_body")
    unknown = sorted(set(body) - {"model", "input", "encoding_format", "dimensions", "user"})
    if unknown:
        raise _bad(f"{', '.join(unknown)}: not supported.", unknown[0], code="unknown_field")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise _bad("encoding_format must be float or base64.", "encoding_format")
    texts = body.get("input")
    if isinstance(texts, list) and texts and not all(isinstance(t, str) for t in texts):
        raise _bad("input: token arrays are not supported; send strings.", "input")
    data = {"feature": options.feature, "model": body.get("model"), "input": texts}
    if body.get("dimensions") is not None:
        data["dimensions"] = body["dimensions"]
    return data, encoding
