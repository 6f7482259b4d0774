"""Waiting for a call's job without a thread: its live events through the channel layer.

A front-door client waits for its job's answer, or reads its text as it streams. No thread and
no database connection is held while it waits: the wait joins the job's group on the channel
layer (the ``job.updated`` and ``job.delta`` events every job publishes, jobs/events.py and
jobs/live_output.py, as the WebSocket hears them) and awaits the next event. Events are best
effort, so the wait also reads the job's row (and its partial text in Redis) when it has heard
nothing for ``SAFETY_READ_SECONDS``, and every ``LAYER_DOWN_READ_SECONDS`` when the channel layer
cannot be joined at all: a lost event delays an answer, it never loses it.

``JobText`` puts a streaming job's text together as a client must see it: the text of the
current attempt, from the deltas (offsets in characters) and the partial text Redis keeps, given
out only where it goes on from what was given out already. A retried attempt starts again at
offset 0: while its text repeats what was given out, nothing is given again; if it says
something else, the rest is held back (``diverged``) and the answer's end decides.
"""

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connections

from jobs.live_text import partial_text
from jobs.models import LlmJob
from llmops.queues import job_group

__all__ = [
    "JobText",
    "JobWatch",
    "in_thread",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

SAFETY_READ_SECONDS = 3.0
"""Heard nothing for this long: read the row (a final event may have been lost)."""
LAYER_DOWN_READ_SECONDS = 1.0
"""Without the channel layer, the row is read this often."""
DB_THREADS = 8
"""Threads of a web process that run the front doors' short database work (authenticate,
submit, read the answer). Waiting uses none: they are shared by every waiting call."""
CHECK_IDLE_CONNECTION_SECONDS = 1.0
"""A thread's connection idle longer than this is pinged before it is used again (a server
restart or timeout may have closed it); a fresh one is opened if the ping fails."""

_executor = ThreadPoolExecutor(max_workers=DB_THREADS, thread_name_prefix="gateway-db")
_last_used = threading.local()


def _usable_connections() -> None:
    idle = time.monotonic() - getattr(_last_used, "at", 0.0)
    if idle < CHECK_IDLE_CONNECTION_SECONDS:
        return
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and not connection.is_usable():
            connection.close()


def in_thread(function: Callable[..., T]) -> Callable[..., Any]:
    """``function`` awaitable, run on the doors' threads. Each thread keeps its database
    connection between calls (at most ``DB_THREADS`` per web process: opening one per call was
    a third of the doors' own time), pinged after a pause and closed after any error, so no
    broken connection is used twice."""

    def run(*args: Any, **kwargs: Any) -> T:
        _usable_connections()
        try:
            return function(*args, **kwargs)
        except BaseException:
            connections.close_all()
            raise
        finally:
            _last_used.at = time.monotonic()

    return sync_to_async(run, thread_sensitive=False, executor=_executor)


def _job_state(job_id: UUID) -> tuple[str, int]:
    status, attempts = LlmJob.objects.values_list("status", "attempts").get(id=job_id)
    return status, attempts


class JobText:
    """The text of a streaming job as given out to one client."""

    def __init__(self) -> None:
        self.given = ""
        self.attempt = 0
        self.attempt_text = ""
        self.diverged = False
        self.gap = False
        """A delta came from past the end of what is known: read the partial text."""

    def feed(self, attempt: int, offset: int, text: str) -> str:
        """What the client gets of this piece (``""``: nothing new)."""
        if attempt < self.attempt:
            return ""
        if attempt > self.attempt:
            self.attempt, self.attempt_text = attempt, ""
        if offset > len(self.attempt_text):
            self.gap = True
            return ""
        end = offset + len(text)
        if end > len(self.attempt_text):
            self.attempt_text = self.attempt_text[:offset] + text
        return self._give()

    def _give(self) -> str:
        known, given = self.attempt_text, self.given
        if self.diverged:
            return ""
        agrees = known.startswith(given) if len(known) > len(given) else given.startswith(known)
        if not agrees:
            self.diverged = True
            return ""
        if len(known) <= len(given):
            return ""
        self.given = known
        return known[len(given) :]


class JobWatch:
    """The events of one job for one waiting call::

        async with JobWatch(job_id, text=JobText()) as watch:
            while watch.final is None:
                piece = await watch.next()   # new text ("" when none)

    ``final`` is the job's final status once it ended."""

    def __init__(self, job_id: UUID, *, text: JobText | None = None) -> None:
        self.job_id = job_id
        self.text = text
        self.layer: Any = None
        self.channel = ""
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.pump: asyncio.Task[None] | None = None
        self.final: str | None = None
        self.caught_up = False

    async def __aenter__(self) -> "JobWatch":
        try:
            layer = get_channel_layer()
            self.channel = await layer.new_channel()
            await layer.group_add(job_group(self.job_id), self.channel)
        except Exception as exc:  # Redis away: the row is read instead
            logger.warning(
                "job %s: channel layer not joined, reading the row: %r", self.job_id, exc
            )
        else:
            self.layer = layer
            self.pump = asyncio.ensure_future(self._pump())
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        if self.pump is not None:
            self.pump.cancel()
            await asyncio.gather(self.pump, return_exceptions=True)
        if self.layer is not None:
            try:
                await asyncio.wait_for(
                    asyncio.shield(self.layer.group_discard(job_group(self.job_id), self.channel)),
                    timeout=2,
                )
            except Exception as exc:  # it expires on its own (group_expiry)
                logger.info("job %s: group not left: %r", self.job_id, exc)

    async def _pump(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("job %s: channel layer receive failed: %r", self.job_id, exc)
                await asyncio.sleep(LAYER_DOWN_READ_SECONDS)
                continue
            self.inbox.put_nowait(message)

    async def next(self, *, timeout: float | None = None) -> str:
        """The next text piece (only with ``text``; ``""`` when none), after at most
        ``timeout`` (by default: until something happened, or the safety read found nothing);
        ``final`` is set once the job has ended."""
        if not self.caught_up:
            self.caught_up = True
            # After joining: what was sent before it is in the row or the partial text.
            found = await self._read()
            if found or self.final is not None:
                return found
        wait = SAFETY_READ_SECONDS if self.pump is not None else LAYER_DOWN_READ_SECONDS
        if timeout is not None:
            wait = min(wait, timeout)
        try:
            message = await asyncio.wait_for(self.inbox.get(), timeout=wait)
        except TimeoutError:
            return await self._read()
        kind = message.get("type")
        if kind == "job.updated":
            status = (message.get("job") or {}).get("status")
            if status in LlmJob.FINAL_STATUSES:
                # Published once the transition committed: the row says it too.
                self.final = status
            return ""
        if kind == "job.delta" and self.text is not None:
            piece = self.text.feed(
                int(message.get("attempt") or 0), int(message["offset"]), str(message["text"])
            )
            if self.text.gap:
                self.text.gap = False
                return piece + await self._read_text()
            return piece
        return ""

    async def _read(self) -> str:
        """Read the row: sets ``final`` once it ended; while it runs, new text from Redis."""
        status, _attempts = await in_thread(_job_state)(self.job_id)
        if status in LlmJob.FINAL_STATUSES:
            self.final = status
            return ""
        if self.text is not None and status == LlmJob.Status.RUNNING:
            return await self._read_text()
        return ""

    async def _read_text(self) -> str:
        assert self.text is not None
        kept = await sync_to_async(partial_text, thread_sensitive=False, executor=_executor)(
            self.job_id
        )
        if kept is None:
            return ""
        attempt, text = kept
        return self.text.feed(attempt, 0, text)
