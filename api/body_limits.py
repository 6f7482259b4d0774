"""A bound on every HTTP request body, enforced before Django reads it (ASGI middleware).

Django's ASGI handler reads the whole body of every request into a temporary file (memory, then
disk) before any middleware or view runs, and sets no limit of its own there:
``DATA_UPLOAD_MAX_MEMORY_SIZE`` is checked only when a view reads ``request.body`` or a form,
never for the files of a multipart body, and a chunked body declares no length at all. So one
client could fill the web host's disk with a single request to any URL. ``BodyLimitMiddleware``
wraps the whole HTTP application (llmops/asgi.py), refuses a declared ``Content-Length`` over the
limit before reading anything, counts a body as it arrives, and answers
``413 request_too_large`` with the project's error body as soon as it passes the limit.

The limit of a request is its view's:

- a DRF view: the largest limit its parsers name (``limit_setting`` of api/parsers.py's
  ``LimitedJSONParser``, the default parser of the whole API: ``LLM_MAX_REQUEST_BYTES``; a view
  that takes larger bodies, such as the batch endpoint, names a parser with a setting of its
  own, and this layer follows). The parser checks the same limit again, so that the bound holds
  under WSGI and Django's test client too;
- anything else (the admin's forms, the sign-in page, a URL no view matches):
  ``LLM_MAX_REQUEST_BYTES``, far above any form of ours; Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``
  is a second line for forms.

WebSocket messages are bounded by the server: llmops/web.py gives uvicorn ``--ws-max-size`` of
``WS_MAX_MESSAGE_BYTES``, and the consumer closes (1009) on a larger message it is handed anyway.
"""

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings
from django.urls import Resolver404, resolve

__all__ = ["BodyLimitMiddleware", "body_limit_for_path", "body_limit_for_view", "too_large_body"]

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def body_limit_for_view(view_class: Any) -> int:
    """The largest body ``view_class`` accepts: its parsers' limits, or the default."""
    limits = [
        getattr(settings, parser.limit_setting)
        for parser in getattr(view_class, "parser_classes", ())
        if getattr(parser, "limit_setting", None)
    ]
    return max(limits, default=settings.LLM_MAX_REQUEST_BYTES)


def body_limit_for_path(path: str) -> int:
    """The limit of a request to ``path`` (without the script prefix)."""
    try:
        match = resolve(path)
    except Resolver404:
        return int(settings.LLM_MAX_REQUEST_BYTES)
    # DRF's as_view() sets .cls, Django's .view_class; a function view has neither.
    view_class = getattr(match.func, "cls", None) or getattr(match.func, "view_class", None)
    return body_limit_for_view(view_class)


def too_large_body(limit: int) -> dict[str, Any]:
    return {
        "code": "request_too_large",
        "message": f"The request body is larger than {limit} bytes.",
        "detail": {"limit_bytes": limit},
    }


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def _refuse(send: Send, limit: int) -> None:
    body = json.dumps(too_large_body(limit)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                # The rest of the body is never read: the connection cannot serve another request.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        root = scope.get("root_path", "")
        path = scope["path"]
        path = path[len(root) :] if root and path.startswith(root) else path
        declared = _declared_length(scope)
        # Looked up only for a request with a body (about 30 us): reads send none.
        limit = body_limit_for_path(path) if declared else None
        if limit is not None and declared is not None and declared > limit:
            self._log(scope, limit, f"declared {declared}")
            await _refuse(send, limit)
            return

        received = 0
        over = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, over, limit
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request" and message.get("body"):
                received += len(message["body"])
                if limit is None:
                    limit = body_limit_for_path(path)
                if received > limit:
                    # Django stops reading at a disconnect and answers nothing; we answer 413.
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted_receive, watched_send)
        if over and not started and limit is not None:
            self._log(scope, limit, f"more than {limit} sent")
            await _refuse(send, limit)

    @staticmethod
    def _log(scope: Scope, limit: int, what: str) -> None:
        logger.warning(
            "%s %s 413: body over %d bytes (%s)", scope.get("method"), scope["path"], limit, what
        )
