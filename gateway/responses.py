"""What both front doors answer alike, each in its own API's error shape: an error with the job's
headers, a method not allowed, a call answered once its job completed or streamed as it runs,
and the read-only views' key check. The views (gateway/anthropic_views.py,
gateway/openai_views.py) keep only what is their API's own: how a body becomes a job, the
answer's shape and the stream's events."""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse

from gateway.calls import (
    Call,
    CallStream,
    Translate,
    call_authorized,
    call_start,
    call_wait,
    job_headers,
)
from gateway.errors import GatewayError, from_job
from jobs.models import LlmJob
from keys.scopes import JOBS_READ, JOBS_WRITE

__all__ = ["DoorResponses", "SSE_HEADERS"]

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

Events = Callable[[Call, CallStream, str], AsyncIterator[bytes]]


class DoorResponses:
    """One door's answers; ``error_body`` gives an error in its API's shape."""

    def __init__(self, error_body: Callable[[GatewayError], dict[str, Any]]) -> None:
        self.error_body = error_body

    def error(self, error: GatewayError, job: LlmJob | None = None) -> JsonResponse:
        headers = {**error.headers, **(job_headers(job) if job is not None else {})}
        return JsonResponse(self.error_body(error), status=error.status, headers=headers)

    def method_not_allowed(self, allowed: str) -> JsonResponse:
        message = f"Method not allowed: use {allowed}."
        return self.error(GatewayError(405, message, kind="invalid_request"))

    async def call(
        self,
        request: HttpRequest,
        *,
        translate: Translate,
        answer: Callable[[Call, LlmJob], Awaitable[dict[str, Any]]],
        stream: Callable[[Call], Awaitable[HttpResponseBase]] | None = None,
    ) -> HttpResponseBase:
        """``POST``: the call submitted as a job, then streamed (when its body asks and the door
        streams) or answered once the job completed, or the job's error."""
        if request.method != "POST":
            return self.method_not_allowed("POST")
        try:
            call = await call_start(request, scope=JOBS_WRITE, translate=translate)
        except GatewayError as error:
            return self.error(error)
        if stream is not None and call.body.get("stream"):
            return await stream(call)
        job = await call_wait(call)
        if job.status != LlmJob.Status.COMPLETED:
            return self.error(from_job(job), job)
        return JsonResponse(await answer(call, job), headers=job_headers(job))

    async def stream(self, call: Call, *, live: bool, events: Events) -> HttpResponseBase:
        """The call's events as the job runs. A job that ends before any text is answered as
        an error (with its status) instead of a stream, when it failed."""
        stream = CallStream(call, live=live)
        first = await stream.begin()
        if not first:
            job = await stream.end()
            if job.status != LlmJob.Status.COMPLETED:
                await stream.close()
                return self.error(from_job(job), job)
        return StreamingHttpResponse(
            events(call, stream, first),
            content_type="text/event-stream; charset=utf-8",
            headers={**SSE_HEADERS, **job_headers(call.job, cost=False)},
        )

    async def refused_read(self, request: HttpRequest) -> JsonResponse | None:
        """A read (``GET`` with a key holding ``jobs:read``), or the answer refusing it."""
        if request.method != "GET":
            return self.method_not_allowed("GET")
        try:
            await call_authorized(request, scope=JOBS_READ)
        except GatewayError as error:
            return self.error(error)
        return None
