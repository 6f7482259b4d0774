"""The fake provider's OpenAI-compatible API: ``POST /openai/v1/chat/completions`` (base URL
``http://127.0.0.1:8787/openai/v1``), as OpenAI, Ollama and vLLM answer it.

A request is read into the Messages API's form and answered by the same deterministic replies
(responses.py ``build_message``: the same text for the same prompt, tool calls when a tool is
named or forced, ``fake_output_tokens=N``, ``fake_stream_seconds=N``, ``fake_tool_script=``),
then written back as a chat completion: with ``"stream": true`` as ``chat.completion.chunk``
events, the usage in a last chunk when ``stream_options.include_usage`` asks for it, and
``data: [DONE]``.

The same faults, scripts, latency and rate windows apply (``/_fake/faults``), in this API's
words: an injected ``429`` is ``rate_limit_exceeded`` with ``retry-after`` and
``x-ratelimit-*`` headers; ``insufficient_quota`` is the 429 of an account out of credit (no
``retry-after``; only this API draws it, the Messages API answers instead); ``stall`` hangs
mid-stream until the client leaves; ``drop`` cuts the stream; ``overloaded_midstream`` sends an
error event inside the stream. Models: the listed ones at their prices (state.py
``OPENAI_PRICES``), any other as a free self-hosted model.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .responses import (
    FAULT_ERRORS,
    ApiError,
    build_message,
    new_request_id,
    parse_request,
    stream_seconds,
)
from .state import FakeProviderState, RateDecision, openai_price_for
from .streaming import BREAK_SHARE, STREAM_FAULTS, paced_chunks

__all__ = ["CHAT_COMPLETIONS_PATH", "OPENAI_ONLY_FAULTS", "chat_completions"]

CHAT_COMPLETIONS_PATH = "/openai/v1/chat/completions"
OPENAI_ONLY_FAULTS = ("insufficient_quota", "repeat_index", "skip_index")
"""Faults of this API alone: the Messages API answers a call that draws one. ``repeat_index``
and ``skip_index`` are the Embeddings endpoint's (openai_embeddings.py): a chat completion that
draws one is answered as usual."""

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Headers = list[tuple[str, str]]

_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    422: "invalid_request_error",
    429: "requests",
}


class _Error(Exception):
    """An answer of this API's errors: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self, status: int, message: str, code: str | None = None, kind: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.kind = kind or _ERROR_TYPES.get(status, "server_error")

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.kind, "param": None, "code": self.code}
        return json.dumps({"error": error}).encode()


def _text_of(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict)
        )  # text parts; images are counted below
    raise _Error(400, f"{where}: content must be a string or a list of parts")


def _parts(content: Any, where: str) -> list[dict[str, Any]] | str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _Error(400, f"{where}.content: must be a string or a list of parts")
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            blocks.append({"type": "image", "source": {"type": "url", "url": url}})
        else:
            raise _Error(400, f"{where}.content[{j}].type: must be 'text' or 'image_url'")
    return blocks


def _as_messages(payload: Any) -> dict[str, Any]:
    """A Chat Completions body in the Messages API's form, for ``parse_request``."""
    if not isinstance(payload, dict):
        raise _Error(400, "The request body must be a JSON object.")
    if not isinstance(payload.get("model"), str) or not payload["model"]:
        raise _Error(400, "you must provide a model parameter", kind="invalid_request_error")
    chat = payload.get("messages")
    if not isinstance(chat, list) or not chat:
        raise _Error(400, "messages: must be a non-empty array")
    temperature = payload.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not 0 <= temperature <= 2
    ):
        raise _Error(400, "temperature: must be a number between 0 and 2")
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(chat):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            system.append(_text_of(message.get("content"), where))
        elif role == "user":
            messages.append({"role": "user", "content": _parts(message.get("content"), where)})
        elif role == "assistant":
            content: list[dict[str, Any]] = []
            if message.get("content"):
                content.append({"type": "text", "text": _text_of(message["content"], where)})
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    raise _Error(400, f"{where}.tool_calls: arguments must be JSON") from None
                content.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id", ""),
                        "name": function.get("name", ""),
                        "input": arguments,
                    }
                )
            messages.append({"role": "assistant", "content": content or ""})
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id", "")),
                "content": _text_of(message.get("content"), where),
            }
            previous = messages[-1] if messages else None
            if previous and previous["role"] == "user" and isinstance(previous["content"], list):
                previous["content"].append(result)
            else:
                messages.append({"role": "user", "content": [result]})
        else:
            raise _Error(400, f"{where}.role: must be system, user, assistant or tool")
    body: dict[str, Any] = {
        "model": payload["model"],
        "max_tokens": payload.get("max_completion_tokens") or payload.get("max_tokens") or 4096,
        "messages": messages,
        "stream": bool(payload.get("stream", False)),
    }
    if system:
        body["system"] = "\n\n".join(system)
    if payload.get("tools"):
        body["tools"] = [
            {
                "name": (tool.get("function") or {}).get("name", ""),
                "description": (tool.get("function") or {}).get("description", ""),
                "input_schema": (tool.get("function") or {}).get("parameters") or {},
            }
            for tool in payload["tools"]
        ]
    choice = payload.get("tool_choice")
    if isinstance(choice, dict):
        body["tool_choice"] = {"type": "tool", "name": (choice.get("function") or {}).get("name")}
    elif choice in ("auto", "none"):
        body["tool_choice"] = {"type": choice}
    elif choice == "required":
        body["tool_choice"] = {"type": "any"}
    stop = payload.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    return body


def _rate_headers(decision: RateDecision | None, *, spent: bool = False) -> Headers:
    """The ``x-ratelimit-*`` headers of this API (requests; reset as a duration)."""
    limit = decision.limit if decision is not None and decision.limit else 60
    remaining = 0 if spent or decision is None else decision.remaining
    reset = f"{decision.retry_after if decision is not None else 1}s"
    return [
        ("x-ratelimit-limit-requests", str(limit)),
        ("x-ratelimit-remaining-requests", str(remaining)),
        ("x-ratelimit-reset-requests", reset),
    ]


def _usage(reply: dict[str, Any], output_tokens: int | None = None) -> dict[str, Any]:
    usage = reply["usage"]
    cached = usage["cache_read_input_tokens"]
    prompt = usage["input_tokens"] + usage["cache_creation_input_tokens"] + cached
    completion = usage["output_tokens"] if output_tokens is None else output_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _tool_calls(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": "call_" + block["id"].removeprefix("toolu_"),
            "type": "function",
            "function": {"name": block["name"], "arguments": json.dumps(block["input"])},
        }
        for block in reply["content"]
        if block["type"] == "tool_use"
    ]


def _completion(reply: dict[str, Any], completion_id: str, created: int) -> dict[str, Any]:
    text = "".join(b.get("text", "") for b in reply["content"] if b["type"] == "text")
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls = _tool_calls(reply)
    if calls:
        message["tool_calls"] = calls
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": reply["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _FINISH_REASONS.get(reply["stop_reason"], "stop"),
            }
        ],
        "usage": _usage(reply),
    }


def _chunk(completion_id: str, created: int, model: str, **fields: Any) -> bytes:
    data = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": fields.pop("choices", []),
        **fields,
    }
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def _send(send: Send, status: int, body: bytes, headers: Headers) -> None:
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})


Fail = Callable[..., Awaitable[None]]


def failer(state: FakeProviderState, send: Send, epoch: int, request_id: str) -> Fail:
    """How a request of this API answers an error: counted, with its request id."""

    async def fail(error: _Error, extra: Headers | None = None) -> None:
        state.count_status(error.status, epoch)
        await _send(
            send, error.status, error.body(), [("x-request-id", request_id), *(extra or [])]
        )

    return fail


def has_bearer(headers: dict[str, str]) -> bool:
    bearer = headers.get("authorization", "")
    return bearer.lower().startswith("bearer ") and bool(bearer[7:].strip())


async def admit(
    state: FakeProviderState, fail: Fail, *, key: str, input_tokens: int, max_tokens: int
) -> tuple[RateDecision | None, Headers, str | None] | None:
    """What every call of this API goes through before its answer: the rate windows (a 429 of
    this API), the script or the drawn latency and fault, and the faults answered as errors
    here (``insufficient_quota``, an injected ``429``). None: the error was sent; else the rate
    decision, its headers and the fault left for the endpoint."""
    decision = state.take_rate_slot(input_tokens=input_tokens, max_tokens=max_tokens)
    rate_headers = _rate_headers(decision) if decision else []
    if decision and not decision.allowed:
        await fail(
            _Error(429, "Rate limit reached for requests.", code="rate_limit_exceeded"),
            [("retry-after", str(decision.retry_after)), *_rate_headers(decision, spent=True)],
        )
        return None
    step = state.scripts.take(key)
    delay = (
        state.draw_latency() if step is None or step.latency_ms is None else step.delay(state.rng)
    )
    if delay:
        await asyncio.sleep(delay)
    fault = state.draw_fault() if step is None else step.fault
    if fault == "insufficient_quota":
        await fail(
            _Error(
                429,
                "You exceeded your current quota, please check your plan and billing details.",
                code="insufficient_quota",
                kind="insufficient_quota",
            )
        )
        return None
    if fault == "429":
        injected = state.injected_rate_headers()
        await fail(
            _Error(429, "Rate limit reached for requests.", code="rate_limit_exceeded"),
            [("retry-after", str(injected.retry_after)), *_rate_headers(injected, spent=True)],
        )
        return None
    return decision, rate_headers, fault


async def chat_completions(
    state: FakeProviderState,
    closing: asyncio.Event,
    scope: Scope,
    receive: Receive,
    send: Send,
    body: bytes,
) -> None:
    """Answer one ``POST /openai/v1/chat/completions`` (its body already read)."""
    epoch = state.count_request()
    request_id = new_request_id()
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    key = headers.get("idempotency-key", "")

    fail = failer(state, send, epoch, request_id)
    if not has_bearer(headers):
        return await fail(
            _Error(401, "You didn't provide an API key.", kind="invalid_request_error")
        )
    try:
        payload = json.loads(body)
        messages_body = _as_messages(payload)
        request = parse_request(messages_body, prices=openai_price_for)
    except ValueError:
        return await fail(_Error(400, "We could not parse the JSON body of your request."))
    except _Error as error:
        return await fail(error)
    except ApiError as error:
        return await fail(_Error(error.status, error.message))
    include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))

    drawn = await admit(
        state,
        fail,
        key=key,
        input_tokens=sum(segment.tokens for segment in request.segments),
        max_tokens=request.max_tokens,
    )
    if drawn is None:
        return None
    decision, rate_headers, fault = drawn
    if not request.stream and fault in STREAM_FAULTS:
        fault = "503" if fault == "overloaded_midstream" else "timeout"
    if fault in FAULT_ERRORS:
        status, message, _details = FAULT_ERRORS[fault]
        return await fail(_Error(status, message), rate_headers)

    reply = build_message(request, state)
    state.settle_tokens(decision, reply["usage"])
    completion_id = "chatcmpl-" + uuid.uuid4().hex[:24]
    created = int(time.time())
    answer_headers = [("x-request-id", request_id), *rate_headers]
    if not request.stream:
        state.bill(request.price, reply["usage"], epoch, request_id=request_id,
                   idempotency_key=key, how="answered")  # fmt: skip
        if fault == "timeout":
            state.count_timed_out(epoch)
            await _until_gone(receive, closing)
            return
        state.count_status(200, epoch)
        answer = json.dumps(_completion(reply, completion_id, created)).encode()
        return await _send(send, 200, answer, answer_headers)
    how, streamed = await _stream(
        state, send, receive, closing, reply, completion_id, created, answer_headers,
        fault if fault in ("stall", "drop", "overloaded_midstream") else None, include_usage,
        seconds=stream_seconds(request),
    )  # fmt: skip
    usage = dict(reply["usage"])
    usage["output_tokens"] = streamed
    state.bill(request.price, usage, epoch, request_id=request_id, idempotency_key=key, how=how)
    if how in ("answered", "error_event"):
        state.count_status(200, epoch)
    elif how == "dropped":
        state.count_dropped(epoch)
    else:
        state.count_timed_out(epoch)


async def _until_gone(receive: Receive, closing: asyncio.Event) -> None:
    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    waits = [asyncio.ensure_future(gone()), asyncio.ensure_future(closing.wait())]
    _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()


def _tokens(text: str) -> int:
    return -(-len(text) // 4)


async def _stream(
    state: FakeProviderState,
    send: Send,
    receive: Receive,
    closing: asyncio.Event,
    reply: dict[str, Any],
    completion_id: str,
    created: int,
    headers: Headers,
    fault: str | None,
    include_usage: bool,
    *,
    seconds: float | None = None,
) -> tuple[str, int]:
    """Stream the answer; returns how it ended (answered, error_event, stalled, dropped, gone)
    and the output tokens streamed (what it is billed for). ``seconds``: the text spread over
    about that long (``fake_stream_seconds=``), whatever the configured pace."""
    model = reply["model"]
    raw = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
    raw += [(k.encode(), v.encode()) for k, v in headers]
    await send({"type": "http.response.start", "status": 200, "headers": raw})
    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.ensure_future(watch())

    async def put(chunk: bytes) -> bool:
        if gone.is_set():
            return False
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        return True

    def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    streamed = 0
    pace = state.config.stream_tokens_per_second
    try:
        if not await put(_chunk(completion_id, created, model,
                                **choice({"role": "assistant", "content": ""}))):  # fmt: skip
            return "gone", 0
        text = "".join(b.get("text", "") for b in reply["content"] if b["type"] == "text")
        break_at = int(len(text) * BREAK_SHARE) if fault else None
        sent = 0
        pieces = paced_chunks(text, total_chars=len(text), tokens_per_second=pace, seconds=seconds)
        for piece, pause in pieces:
            if break_at is not None and sent >= break_at:
                return await _break(fault or "", put, send, gone, closing, streamed)
            if not await put(_chunk(completion_id, created, model, **choice({"content": piece}))):
                return "gone", streamed
            sent += len(piece)
            streamed += _tokens(piece)
            await asyncio.sleep(pause)
        if break_at is not None:
            return await _break(fault or "", put, send, gone, closing, streamed)
        for index, call in enumerate(_tool_calls(reply)):
            opening = {"index": index, "id": call["id"], "type": "function",
                       "function": {"name": call["function"]["name"], "arguments": ""}}  # fmt: skip
            arguments = {"index": index, "function": {"arguments": call["function"]["arguments"]}}
            await put(_chunk(completion_id, created, model, **choice({"tool_calls": [opening]})))
            await put(_chunk(completion_id, created, model, **choice({"tool_calls": [arguments]})))
        finish = _FINISH_REASONS.get(reply["stop_reason"], "stop")
        await put(_chunk(completion_id, created, model, **choice({}, finish)))
        output_tokens = reply["usage"]["output_tokens"]
        if include_usage:
            await put(_chunk(completion_id, created, model, usage=_usage(reply)))
        await put(b"data: [DONE]\n\n")
        if gone.is_set():
            return "gone", streamed
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return "answered", output_tokens
    finally:
        watcher.cancel()


async def _break(
    fault: str,
    put: Callable[[bytes], Awaitable[bool]],
    send: Send,
    gone: asyncio.Event,
    closing: asyncio.Event,
    streamed: int,
) -> tuple[str, int]:
    if fault == "overloaded_midstream":
        error = {"error": {"message": "The server is overloaded.", "type": "server_error",
                           "code": None}}  # fmt: skip
        await put(f"data: {json.dumps(error)}\n\n".encode())
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return "error_event", streamed
    if fault == "stall":
        # A self-hosted model hung with the connection open: nothing more until the client leaves.
        waits = [asyncio.ensure_future(gone.wait()), asyncio.ensure_future(closing.wait())]
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return "stalled", streamed
    return "dropped", streamed  # returning mid-body makes uvicorn close the connection
