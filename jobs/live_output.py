"""A streaming job's text, live: ``job.delta`` events and the partial text kept in Redis.

While an attempt streams, its text pieces are gathered and flushed at most every
``LLM_DELTA_INTERVAL_SECONDS`` (5 a second by default), so a fast stream does not flood the
channel layer. Each flush first appends to the job's partial text in Redis (at most
``LLM_PARTIAL_TEXT_MAX_CHARS``), then publishes ``{"type": "job.delta", "job", "attempt",
"offset", "text"}``: a client that joins late reads the partial text, then hears only what came
after it (jobs/consumers.py), with no gap and no duplicate. Offsets count Unicode characters
(code points) of the current attempt's text; a retried attempt starts again at offset 0.

Best effort, like every live event: Redis or the channel layer being down never fails the job.
"""

import logging
import time
from concurrent.futures import Future
from uuid import UUID

from django.conf import settings
from redis.exceptions import RedisError

from jobs.events import event_published, publish_event_nowait
from jobs.live_text import (
    TTL_SECONDS,
    live_keys_clear,
    live_text_redis,
    partial_text,
    partial_text_clear,
    running_text,
)
from llmops.queues import (
    all_jobs_group,
    job_events_group,
    job_group,
    job_partial_attempt_key,
    job_partial_text_key,
)

__all__ = [
    "DELTA_EVENT",
    "LiveOutput",
    "live_keys_clear",
    "partial_text",
    "partial_text_clear",
    "running_text",
]

logger = logging.getLogger(__name__)

DELTA_EVENT = "job.delta"


class LiveOutput:
    """The ``on_text`` of one attempt's call (providers/base.py ``ProviderRequest``)."""

    def __init__(self, *, job_id: UUID, user_id: int, attempt: int) -> None:
        self.job_id, self.user_id, self.attempt = job_id, user_id, attempt
        self.groups = [job_events_group(user_id), job_group(job_id), all_jobs_group()]
        self.key = job_partial_text_key(job_id)
        self.attempt_key = job_partial_attempt_key(job_id)
        self.published = 0
        """Characters handed out in deltas (sent or on their way): the next delta's offset."""
        self.kept = 0
        """Characters kept in Redis (at most LLM_PARTIAL_TEXT_MAX_CHARS)."""
        self.pending: list[str] = []
        self.backlog = ""
        """Text in no delta yet: gathered while the last delta is on its way, or given back by
        a delta that did not go out."""
        self.in_flight: tuple[Future[None], int, str] | None = None
        self.last_flush = 0.0
        self.events = 0
        self._started = False
        self._lost = False

    def __call__(self, text: str) -> None:
        if not text:
            return
        self.pending.append(text)
        if time.monotonic() - self.last_flush >= settings.LLM_DELTA_INTERVAL_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Append what is pending to the partial text, then queue it as one delta without
        waiting: the stream is never held up by the channel layer. One delta is on its way at a
        time; one that did not go out is sent again with the next, from its own offset, so a
        live client sees a lost event late, not as a gap."""
        self.last_flush = time.monotonic()
        if self.pending:
            chunk = "".join(self.pending)
            self.pending.clear()
            self._keep(chunk)
            self.backlog += chunk
        if self.in_flight is not None:
            if not self.in_flight[0].done():
                return
            self._settle(timeout=0)
        if not self.backlog:
            return
        offset, text = self.published, self.backlog
        self.backlog, self.published = "", offset + len(text)
        message = {
            "type": DELTA_EVENT,
            "job": str(self.job_id),
            "attempt": self.attempt,
            "offset": offset,
            "text": text,
        }
        future = publish_event_nowait(self.groups, message, subject=str(self.job_id))
        self.in_flight = (future, offset, text)

    def _settle(self, *, timeout: float) -> None:
        assert self.in_flight is not None
        future, offset, text = self.in_flight
        self.in_flight = None
        if event_published(future, about=f"job {self.job_id} delta", timeout=timeout):
            self.events += 1
        else:
            self.backlog, self.published = text + self.backlog, offset

    def close(self) -> None:
        """The call is over: publish what is still pending or was lost, waiting for each at most
        ``JOB_EVENTS_PUBLISH_TIMEOUT`` (two tries), so that the last delta leaves before the
        job's final ``job.updated``."""
        for _ in range(2):
            self.flush()
            if self.in_flight is not None:
                self._settle(timeout=settings.JOB_EVENTS_PUBLISH_TIMEOUT)
            if not self.backlog and not self.pending:
                return

    def _keep(self, chunk: str) -> None:
        room = settings.LLM_PARTIAL_TEXT_MAX_CHARS - self.kept
        if self._lost or (room <= 0 and self._started):
            return
        kept = chunk[: max(0, room)]
        try:
            pipe = live_text_redis().pipeline(transaction=True)
            if not self._started:
                # A new attempt's text replaces the last attempt's.
                pipe.set(self.key, kept, ex=TTL_SECONDS)
                pipe.set(self.attempt_key, self.attempt, ex=TTL_SECONDS)
            else:
                pipe.append(self.key, kept)
            pipe.execute()
        except RedisError as exc:
            # A text with a hole would resume a client at the wrong place: keep none instead.
            logger.warning("job %s: partial text not kept: %r", self.job_id, exc)
            self._lost = True
            partial_text_clear(self.job_id)
            return
        self._started = True
        self.kept += len(kept)
