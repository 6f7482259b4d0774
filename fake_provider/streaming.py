"""The fake provider's streamed answer (``"stream": true``), as the Messages API streams one.

Server-sent events, in the API's order: ``message_start`` (the message with empty content and
the input usage, output_tokens 1), then for each content block ``content_block_start``, its
deltas and ``content_block_stop``; ``message_delta`` with the stop reason and the output tokens;
``message_stop``. A ``ping`` follows the first block's start and comes again every
``PING_SECONDS`` of a slow stream, as the API sends them while it works.

Errors before the stream starts are plain HTTP errors (app.py); these faults happen inside it:

- ``overloaded_midstream``: after a part of the text, ``event: error`` with an
  ``overloaded_error``, in the 200 stream, and the stream ends (the client sees a 529's error);
- ``stall``: after a part of the text, nothing more, not even pings, until the client goes away
  (a self-hosted model hung with the connection open);
- ``drop`` (streamed): after a part of the text the connection dies.

Each is billed for what was generated before it: the input and the output streamed so far.

The pace: as fast as the socket takes it, ``stream_tokens_per_second`` of the configuration, or,
when the last user message holds ``fake_stream_seconds=N`` (responses.py), the text spread over
about N seconds: a call that lasts long enough to watch or to cancel, asked by the prompt alone.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PING_SECONDS",
    "STREAM_FAULTS",
    "StreamPlan",
    "event",
    "paced_chunks",
    "stream_answer",
    "text_chunks",
]

PING_SECONDS = 10.0
"""A slow stream's pings: at least one every this many seconds."""
CHUNK_CHARS = 64
"""Characters per text delta (about 16 tokens)."""
STREAM_FAULTS = ("overloaded_midstream", "stall")
"""Faults that exist only inside a stream (``drop`` cuts a stream too)."""
BREAK_SHARE = 0.5
"""A fault inside a stream strikes after this share of the text."""

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def text_chunks(text: str, size: int = CHUNK_CHARS) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def paced_chunks(
    text: str, *, total_chars: int, tokens_per_second: float | None, seconds: float | None
) -> Iterator[tuple[str, float]]:
    """The pieces of a text block and the pause after each. ``seconds`` spreads the answer's
    ``total_chars`` over that long, in pieces small enough to come about once a second (a short
    answer's single characters come further apart); else ``tokens_per_second`` paces each
    piece; else there is no pause."""
    if seconds and total_chars:
        size = max(1, min(CHUNK_CHARS, math.ceil(total_chars / seconds)))
        for chunk in text_chunks(text, size):
            yield chunk, seconds * len(chunk) / total_chars
        return
    for chunk in text_chunks(text):
        yield chunk, _tokens(chunk) / tokens_per_second if tokens_per_second else 0.0


def _opening(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A block's ``content_block_start`` form and the deltas that complete it, as the API
    streams them: text and thinking grow from empty, a tool call's input comes as JSON text."""
    if block["type"] == "text":
        return {**block, "text": ""}, []
    if block["type"] == "thinking":
        return {**block, "thinking": "", "signature": ""}, [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    if block["type"] == "tool_use":
        return {**block, "input": {}}, [
            {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        ]
    return block, []


def _tokens(text: str) -> int:
    return -(-len(text) // 4)


@dataclass
class StreamPlan:
    """What to stream: the full answer (``build_message``), at what pace, and how it ends."""

    reply: dict[str, Any]
    tokens_per_second: float | None = None
    """None: as fast as the socket takes it."""
    fault: str | None = None
    """None, ``overloaded_midstream``, ``stall`` or ``drop``."""
    seconds: float | None = None
    """The text spread over about this long (``fake_stream_seconds=``), whatever the rate."""


@dataclass
class StreamEnd:
    how: str
    """answered, error_event, stalled, dropped or gone (the client left first)."""
    output_tokens: int
    """Output tokens streamed before the end: what the call is billed for."""


async def stream_answer(
    plan: StreamPlan,
    send: Send,
    receive: Receive,
    headers: list[tuple[str, str]],
    closing: asyncio.Event,
) -> StreamEnd:
    """Send the answer as server-sent events; returns how the stream ended."""
    reply = plan.reply
    raw = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
    raw += [(k.encode(), v.encode()) for k, v in headers]
    await send({"type": "http.response.start", "status": 200, "headers": raw})

    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.ensure_future(watch())
    streamed = 0
    last_ping = asyncio.get_running_loop().time()

    async def put(chunk: bytes) -> bool:
        if gone.is_set():
            return False
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        return True

    try:
        usage = reply["usage"]
        start = {
            **{k: v for k, v in reply.items() if k not in ("content", "usage")},
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        if not await put(event("message_start", {"type": "message_start", "message": start})):
            return StreamEnd("gone", 0)
        text = "".join(b.get("text", "") for b in reply["content"] if b["type"] == "text")
        break_at = int(len(text) * BREAK_SHARE) if plan.fault else None
        for index, block in enumerate(reply["content"]):
            opening, deltas = _opening(block)
            await put(
                event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": opening},
                )
            )
            if index == 0:
                await put(event("ping", {"type": "ping"}))
            if block["type"] != "text":
                for delta in deltas:
                    await put(
                        event(
                            "content_block_delta",
                            {"type": "content_block_delta", "index": index, "delta": delta},
                        )
                    )
                await put(
                    event("content_block_stop", {"type": "content_block_stop", "index": index})
                )
                continue
            sent_chars = 0
            pieces = paced_chunks(
                block["text"],
                total_chars=len(text),
                tokens_per_second=plan.tokens_per_second,
                seconds=plan.seconds,
            )
            for chunk, pause in pieces:
                if break_at is not None and sent_chars >= break_at:
                    return await _break(plan.fault or "", put, gone, closing, streamed, send)
                delta = {"type": "text_delta", "text": chunk}
                if not await put(
                    event(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                    )
                ):
                    return StreamEnd("gone", streamed)
                sent_chars += len(chunk)
                streamed += _tokens(chunk)
                if pause:
                    now = asyncio.get_running_loop().time()
                    if now - last_ping >= PING_SECONDS:
                        last_ping = now
                        await put(event("ping", {"type": "ping"}))
                await asyncio.sleep(pause)
            await put(event("content_block_stop", {"type": "content_block_stop", "index": index}))
        output_tokens = usage["output_tokens"]
        await put(
            event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": reply["stop_reason"],
                        "stop_sequence": reply.get("stop_sequence"),
                    },
                    "usage": {"output_tokens": output_tokens},
                },
            )
        )
        await put(event("message_stop", {"type": "message_stop"}))
        if gone.is_set():
            return StreamEnd("gone", streamed)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return StreamEnd("answered", output_tokens)
    finally:
        watcher.cancel()


async def _break(
    fault: str,
    put: Callable[[bytes], Awaitable[bool]],
    gone: asyncio.Event,
    closing: asyncio.Event,
    streamed: int,
    send: Send,
) -> StreamEnd:
    """The fault strikes mid-stream, after ``streamed`` output tokens."""
    if fault == "overloaded_midstream":
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        await put(event("error", error))
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return StreamEnd("error_event", streamed)
    if fault == "stall":
        # Nothing more, no ping: the client's idle bound must end it (or the server shuts down).
        waits = [asyncio.ensure_future(gone.wait()), asyncio.ensure_future(closing.wait())]
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return StreamEnd("stalled", streamed)
    # drop: returning without finishing the body makes uvicorn close the connection.
    return StreamEnd("dropped", streamed)
