"""The job body (the Messages API's) as an OpenAI-compatible Chat Completions request, and the
streamed answer back in the job's ``output`` shape. Pure: no SDK, no network.

Request: ``system`` becomes the first message; text and image parts become content parts
(images as data: or https: URLs); an assistant's ``tool_use`` blocks become its ``tool_calls``
and a user's ``tool_result`` blocks ``tool`` messages; ``tools`` become functions, ``tool_choice``
its Chat Completions form, ``stop_sequences`` ``stop``; ``max_tokens``, ``temperature``,
``top_p`` as given (``top_k`` too, which vLLM and Ollama read). What the API has no form for
(documents, thinking, server tools) is refused before the call (``Untranslatable``).

Answer: ``finish_reason`` becomes ``stop_reason``, tool calls ``tool_use`` blocks, and the usage
the ledger's kinds, cached prompt tokens as cache reads (``prompt_tokens`` counts them too).
"""

import json
from typing import Any

__all__ = [
    "FINISH_REASONS",
    "STOP_REASONS",
    "TOOL_CHOICES",
    "Untranslatable",
    "chat_request",
    "image_block",
    "output_content",
    "stop_reason_of",
    "usage_of",
]

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
"""``finish_reason`` -> the Messages API's ``stop_reason``."""
FINISH_REASONS = {
    **{stop: finish for finish, stop in STOP_REASONS.items() if finish != "function_call"},
    "stop_sequence": "stop",
    "pause_turn": "stop",
}
"""The other way (the front door's answers, gateway/): ``stop_reason`` -> ``finish_reason``."""
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
"""The Messages API's ``tool_choice`` types -> Chat Completions' (and back, at the front door)."""


class Untranslatable(ValueError):
    """A job body an OpenAI-compatible API cannot be asked: fatal for the job, nothing sent."""


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "text":
                raise Untranslatable(f"{where}: only text blocks can be sent to this provider")
            parts.append(str(block.get("text", "")))
        return "\n\n".join(parts)
    return "" if content is None else json.dumps(content)


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        raise Untranslatable(f"{where}: an image source of type {source.get('type')!r}")
    return {"type": "image_url", "image_url": {"url": url}}


def image_block(url: str) -> dict[str, Any]:
    """An ``image_url`` part as the Messages API's image block (``_image`` the other way): a
    ``data:`` URL as a base64 source, any other as a URL source."""
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _user_messages(content: Any, where: str) -> list[dict[str, Any]]:
    """One user turn: its tool results first (each a ``tool`` message, as the API wants them
    right after the assistant's calls), then what it says."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content or []):
        here = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            parts.append(_image(block, here))
        elif kind == "tool_result":
            result = _text(block.get("content", ""), here)
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": str(block.get("tool_use_id", "")),
                    "content": ("Error: " + result) if block.get("is_error") else result,
                }
            )
        else:
            raise Untranslatable(f"{here}: a {kind!r} block has no Chat Completions form")
    if parts:
        only_text = all(part["type"] == "text" for part in parts)
        messages.append(
            {
                "role": "user",
                "content": "\n\n".join(p["text"] for p in parts) if only_text else parts,
            }
        )
    return messages


def _assistant_message(content: Any, where: str) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content or []):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id", "")),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name", "")),
                        "arguments": json.dumps(block.get("input") or {}),
                    },
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue  # another provider's reasoning: not for this one
        else:
            raise Untranslatable(f"{where}.content[{j}]: a {kind!r} block has no Chat form")
    message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    functions = []
    for i, tool in enumerate(tools):
        if tool.get("type", "custom") != "custom":
            raise Untranslatable(f"tools[{i}]: the server tool {tool.get('type')!r}")
        function: dict[str, Any] = {
            "name": tool["name"],
            "parameters": tool.get("input_schema") or {"type": "object"},
        }
        if tool.get("description"):
            function["description"] = tool["description"]
        functions.append({"type": "function", "function": function})
    return functions


def _tool_choice(choice: dict[str, Any]) -> tuple[Any, bool | None]:
    """``tool_choice`` and ``parallel_tool_calls`` (None: not said)."""
    kind = choice.get("type")
    parallel = False if choice.get("disable_parallel_tool_use") else None
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}, parallel
    return TOOL_CHOICES.get(str(kind), "auto"), parallel


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The Chat Completions arguments of a job body (streamed, with its usage)."""
    unknown = set(body) - {
        "model",
        "max_tokens",
        "messages",
        "system",
        "temperature",
        "tools",
        "tool_choice",
        "stop_sequences",
        "top_p",
        "top_k",
        "metadata",
        "thinking",
    }
    if unknown:
        raise Untranslatable(f"{', '.join(sorted(unknown))}: no Chat Completions form")
    if body.get("thinking"):
        raise Untranslatable("thinking: extended thinking is the Anthropic API's")
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _text(body["system"], "system")})
    for i, message in enumerate(body.get("messages") or []):
        where = f"messages[{i}]"
        if message.get("role") == "assistant":
            messages.append(_assistant_message(message.get("content"), where))
        else:
            messages.extend(_user_messages(message.get("content"), where))
    request: dict[str, Any] = {
        "model": body["model"],
        "messages": messages,
        # max_tokens, not max_completion_tokens: what Ollama, vLLM, LM Studio and OpenAI's chat
        # models all read (OpenAI's reasoning models want the other).
        "max_tokens": body["max_tokens"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            request[name] = body[name]
    if body.get("stop_sequences"):
        request["stop"] = list(body["stop_sequences"])
    if body.get("tools"):
        request["tools"] = _tools(body["tools"])
    if body.get("tool_choice"):
        choice, parallel = _tool_choice(body["tool_choice"])
        request["tool_choice"] = choice
        if parallel is not None:
            request["parallel_tool_calls"] = parallel
    if body.get("top_k") is not None:
        request["extra_body"] = {"top_k": body["top_k"]}
    return request


def stop_reason_of(finish_reason: str | None) -> str:
    return STOP_REASONS.get(finish_reason or "", finish_reason or "")


def output_content(text: str, calls: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The answer's content blocks: its text, then each tool call as a ``tool_use`` block (its
    arguments parsed; arguments that are not a JSON object are kept as ``{"_raw": ...}``)."""
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    for call in calls:
        try:
            arguments = json.loads(call.get("arguments") or "{}")
        except ValueError:
            arguments = None
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": call.get("name", ""),
                "input": arguments if isinstance(arguments, dict) else {"_raw": call["arguments"]},
            }
        )
    return content


def usage_of(usage: Any) -> dict[str, int]:
    """A Chat Completions usage as the ledger's kinds (``prompt_tokens`` includes the cached
    ones, which are billed as cache reads)."""
    if usage is None:
        return {}
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    return {
        "input_tokens": max(0, prompt - cached),
        "output_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
        "cache_write_5m_tokens": 0,
        "cache_write_1h_tokens": 0,
        "cache_read_tokens": cached,
        "web_search_requests": 0,
    }
