"""RequestLogMiddleware: a request id for every HTTP request, and one access-log line for it.

The id is the caller's ``X-Request-ID`` when it is sane (1-128 characters of letters, digits and
``._:-``; a proxy or load balancer usually sets one), otherwise a fresh uuid4 hex. It is bound
as ``request_id`` in the log context (llmops/logs.py) while the request runs, so every line the
request causes carries it, and it is sent back in the ``X-Request-ID`` response header.

After the response, the ``django.request`` line of a 4xx/5xx answer (Django would log it
outside the request's context), then one line on logger ``llmops.access``: method, path (never
the query string: it may hold a token), status, duration in ms. uvicorn's own access log is off
(``uvicorn.access`` in settings.LOGGING): it would be a second line per request, without the
request id. Health probes that succeed are logged at DEBUG: a load balancer calls them every
few seconds.

It also binds the request for the audit trail (audit/context.py): a change the request makes
names its user and key.

Works under WSGI and ASGI: async-capable, so under ASGI it runs in the request's own task and
the context it binds reaches the sync views that asgiref runs on threads (they get a copy).
"""

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase
from django.utils.log import log_response

from audit.context import request_bound
from llmops.logs import log_context
from tracing.context import TraceParent, parse_traceparent, trace_parent_bound

__all__ = ["REQUEST_ID_HEADER", "RequestLogMiddleware", "request_id_from"]

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
QUIET_PATHS = frozenset({"/healthz", "/readyz"})
"""Probed every few seconds: a successful answer is logged at DEBUG only."""

access_logger = logging.getLogger("llmops.access")

GetResponse = Callable[[HttpRequest], HttpResponseBase]
AsyncGetResponse = Callable[[HttpRequest], Awaitable[HttpResponseBase]]


def request_id_from(request: HttpRequest) -> str:
    """The caller's X-Request-ID if it is sane, else a new one: a header is never trusted to be
    short or printable (it lands in every log line of the request)."""
    given = request.headers.get(REQUEST_ID_HEADER, "")
    if _SANE_REQUEST_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


def _log_access(request: HttpRequest, response: HttpResponseBase, started: float) -> None:
    status = response.status_code
    quiet = request.path in QUIET_PATHS and status < 400
    if status >= 400 and not getattr(response, "_has_been_logged", False):
        if request.path in QUIET_PATHS:
            # A 503 from /readyz is an answer, not a server error: the access line and
            # ops.health's line when readiness changes say enough.
            response._has_been_logged = True  # type: ignore[attr-defined]
        else:
            # Django's handler logs a 4xx/5xx response (django.request) after the middleware
            # has returned, outside this request's log context; logged here, the same line
            # carries the request id, and Django skips its own.
            log_response(
                "%s: %s",
                response.reason_phrase,
                request.path,
                response=response,  # type: ignore[arg-type]  # any response has a status
                request=request,
            )
    access_logger.log(
        logging.DEBUG if quiet else logging.INFO,
        "%s %s %s",
        request.method,
        request.path,
        status,
        extra={
            "method": request.method,
            "path": request.path,
            "status_code": status,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        },
    )


def _bound(request_id: str, caller: TraceParent | None) -> Any:
    """The request's log context: its id, and the caller's trace and span when it sent a W3C
    ``traceparent`` (what it submits continues that trace: tracing/context.py)."""
    if caller is None:
        return log_context(request_id=request_id)
    return log_context(request_id=request_id, trace_id=caller.trace_id, span_id=caller.span_id)


class RequestLogMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse | AsyncGetResponse) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self._acall(request)
        request_id = request_id_from(request)
        started = time.monotonic()
        caller = parse_traceparent(request.headers.get("traceparent"))
        with _bound(request_id, caller), request_bound(request), trace_parent_bound(caller):
            response = self.get_response(request)  # type: ignore[assignment]
            assert isinstance(response, HttpResponseBase)
            response.headers[REQUEST_ID_HEADER] = request_id
            _log_access(request, response, started)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        request_id = request_id_from(request)
        started = time.monotonic()
        caller = parse_traceparent(request.headers.get("traceparent"))
        with _bound(request_id, caller), request_bound(request), trace_parent_bound(caller):
            response = await self.get_response(request)  # type: ignore[misc]
            response.headers[REQUEST_ID_HEADER] = request_id
            _log_access(request, response, started)
        return response
