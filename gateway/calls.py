"""One front-door call, whichever door: authenticate, submit the job, wait for its end or
follow its text, and cancel it when its client hangs up. Async: a waiting call holds no thread
and no database connection (gateway/waiting.py); the short database work runs on the doors'
threads (``in_thread``).

A client that goes away (the ASGI server says so, Django cancels the view or the streaming
response's iterator) cancels its job through the job API's cancel service
(``call_hung_up``): a waiting job at once, a running one's stream closed by its worker and booked
with what streamed. ``LLM-Keep-On-Disconnect: true`` leaves the job to complete; its answer is
then read in the job API (``GET /api/v1/jobs/<LLM-Job-Id>/``).
"""

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest
from django.views.decorators.csrf import csrf_exempt

from api.errors import SERVICE_UNAVAILABLE_RETRY_AFTER, ApplicationError
from gateway.errors import GatewayError, from_application_error
from gateway.headers import CallOptions, call_options
from gateway.selectors import job_read
from gateway.services import (
    call_authenticate,
    call_hung_up,
    call_submit,
    call_throttle,
    secret_of,
)
from gateway.waiting import JobText, JobWatch, in_thread
from jobs.models import LlmJob
from jobs.validation import JobRequest
from keys.models import ApiKey

__all__ = [
    "API_KEY_ONLY",
    "Call",
    "CallStream",
    "call_authorized",
    "call_body",
    "call_start",
    "call_wait",
    "door_errors",
    "front_door",
    "job_headers",
]

logger = logging.getLogger(__name__)

PING_SECONDS = 10.0
"""A stream quiet this long gets a ``ping`` (or a comment): proxies and clients that time out an
idle connection keep it."""

Translate = Callable[[Any, CallOptions], JobRequest]
View = TypeVar("View", bound=Callable[..., Any])

API_KEY_ONLY = "api_key_only"
"""The mark of a front door's view (tests/test_csrf.py reads it)."""


def front_door(view: View) -> View:
    """A front door's view: exempt from the CSRF check, since it authenticates an API key only,
    never a session (a session cookie opens nothing here, as an SDK sends none)."""
    exempt = csrf_exempt(view)
    setattr(exempt, API_KEY_ONLY, True)
    return exempt


@dataclass
class Call:
    job: LlmJob
    """The job as submitted (or the first job of a repeated Idempotency-Key)."""
    body: dict[str, Any]
    options: CallOptions
    created: bool


def call_body(request: HttpRequest) -> Any:
    """The request's JSON body (400 when it is not JSON)."""
    try:
        return json.loads(request.body or b"null")
    except ValueError:
        raise GatewayError(400, "The body is not valid JSON.", code="malformed_json") from None


@contextmanager
def door_errors() -> Iterator[None]:
    """A refusal of the service layer as a ``GatewayError``: an ``ApplicationError`` (the key,
    the body, a budget, the model), or an unreachable database (503, nothing written)."""
    try:
        yield
    except ApplicationError as exc:
        raise from_application_error(exc) from None
    except (OperationalError, InterfaceError) as exc:
        # The database is unreachable: nothing was written (api/errors.py answers the same).
        logger.error("front door: service unavailable: %s", type(exc).__name__)
        raise GatewayError(
            503,
            "A backing service is unavailable; nothing was saved. Retry shortly.",
            code="service_unavailable",
            headers={"Retry-After": str(SERVICE_UNAVAILABLE_RETRY_AFTER)},
        ) from None


def _start(request: HttpRequest, scope: str, translate: Translate) -> Call:
    with door_errors():
        key = call_authenticate(secret=secret_of(request), scope=scope)
        call_throttle(request=request, key=key)
        options = call_options(request.headers)
        body = call_body(request)
        job, created = call_submit(key=key, request=translate(body, options), options=options)
    return Call(job=job, body=body, options=options, created=created)


async def call_start(request: HttpRequest, *, scope: str, translate: Translate) -> Call:
    """The call submitted as a job of its key's user; ``GatewayError`` for a refusal (nothing
    written)."""
    submitting = asyncio.ensure_future(in_thread(_start)(request, scope, translate))
    try:
        call: Call = await asyncio.shield(submitting)
    except asyncio.CancelledError:
        # The client hung up while its call was being submitted: the submit goes on in its
        # thread, and the job it makes is cancelled like any hung-up call's.
        try:
            submitted = await submitting
        except Exception:
            raise asyncio.CancelledError from None
        await _hang_up(submitted)
        raise
    return call


def _authorized(request: HttpRequest, scope: str) -> ApiKey:
    try:
        return call_authenticate(secret=secret_of(request), scope=scope)
    except ApplicationError as exc:
        raise from_application_error(exc) from None


async def call_authorized(request: HttpRequest, *, scope: str) -> ApiKey:
    """The key of a request that creates no job (the models, a token count)."""
    key: ApiKey = await in_thread(_authorized)(request, scope)
    return key


async def _hang_up(call: Call) -> None:
    if call.options.keep_on_disconnect:
        return
    # Shielded: a second cancel of the request must not stop the job's cancel half-way.
    await asyncio.shield(in_thread(call_hung_up)(job_id=call.job.id))


async def call_wait(call: Call) -> LlmJob:
    """The job once it has ended; a client that hangs up meanwhile cancels it."""
    try:
        async with JobWatch(call.job.id) as watch:
            while watch.final is None:
                await watch.next()
    except asyncio.CancelledError:
        await _hang_up(call)
        raise
    job: LlmJob = await in_thread(job_read)(job_id=call.job.id)
    return job


def job_headers(job: LlmJob, *, cost: bool = True) -> dict[str, str]:
    """``LLM-Job-Id`` (the job in the job API) and ``LLM-Cost-USD`` (the sum of its ledger rows,
    every attempt's), and the job id as the answer's ``request-id``."""
    headers = {"LLM-Job-Id": str(job.id), "request-id": f"req_{job.id.hex}"}
    if cost:
        headers["LLM-Cost-USD"] = str(job.cost_usd)
    return headers


class CallStream:
    """A streaming call's job, followed: ``begin`` waits until there is text to give or the job
    has ended (so that an answer that fails before any text gets its error's own status),
    ``pieces`` gives the text as it streams, ``end`` reads the job once it ended. Its owner
    calls ``close``; ``hung_up`` when the client went away."""

    def __init__(self, call: Call, *, live: bool) -> None:
        self.call = call
        self.text = JobText() if live else None
        self.watch = JobWatch(call.job.id, text=self.text)
        self.finished = False
        self.job: LlmJob | None = None
        """The job as it ended (``end``)."""
        self.closed = False

    @property
    def given(self) -> str:
        return self.text.given if self.text is not None else ""

    async def begin(self) -> str:
        """The first text ("" when the job ended before any)."""
        # The request's task ends once its response is sent, or when its client hangs up, even
        # before the response's iterator started (which then never runs its own clean-up).
        task = asyncio.current_task()
        if task is not None:
            task.add_done_callback(lambda _task: self._close_soon())
        try:
            await self.watch.__aenter__()
            while self.watch.final is None:
                piece = await self.watch.next()
                if piece:
                    return piece
        except BaseException:
            await self.close(hung_up=True)
            raise
        return ""

    async def pieces(self) -> AsyncIterator[str]:
        """Text as it streams; ``""`` after ``PING_SECONDS`` of quiet. Ends with the job."""
        quiet_since = time.monotonic()
        while self.watch.final is None:
            piece = await self.watch.next(timeout=PING_SECONDS)
            if piece:
                quiet_since = time.monotonic()
                yield piece
            elif time.monotonic() - quiet_since >= PING_SECONDS:
                quiet_since = time.monotonic()
                yield ""

    async def end(self) -> LlmJob:
        job: LlmJob = await in_thread(job_read)(job_id=self.call.job.id)
        self.job, self.finished = job, True
        return job

    async def close(self, *, hung_up: bool = False) -> None:
        """Leave the job's events; a stream that did not reach its end (its client went away)
        cancels the job. Once only."""
        if self.closed:
            return
        self.closed = True
        await self.watch.__aexit__(None, None, None)
        if hung_up or not self.finished:
            await _hang_up(self.call)

    def _close_soon(self) -> None:
        if not self.closed:
            task = asyncio.ensure_future(self.close())
            _closing.add(task)  # held until done: the loop keeps only a weak reference
            task.add_done_callback(_closing.discard)


_closing: set["asyncio.Future[None]"] = set()
