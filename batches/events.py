"""Live batch events on the owner's WebSocket ``/ws/jobs/`` (jobs/consumers.py), beside the job
events of its jobs:

    {"type": "batch.progress",
     "batch": {"id", "status", "total", "pending", "completed", "failed", "cancelled"}}
    {"type": "batch.finished", "batch": {...the batch as GET /api/v1/batches/<id>/ shows it}}

``batch.progress`` is coalesced: a process (a web worker, an llm worker with its threads, the
worker cancelling a batch) sends at most one per batch every ``LLM_BATCH_PROGRESS_INTERVAL``
seconds (1): the first change at once, later ones of the interval folded into one sent at its
end with the newest counters. A 10,000-item batch on two llm workers thus sends a few events a
second, not 10,000. Each event carries the counters as its transition committed them, so events
from different processes may arrive a moment out of order; ``batch.finished`` (sent once, when
the batch finishes) and ``GET /api/v1/batches/<id>/`` have the final numbers.

Published after the commit of the transition that caused them, through the sender and timeout
of job events (``jobs.events.publish_event``): best effort, never failing or holding a job.
"""

import logging
import threading
import time
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction

from batches.models import Batch
from jobs.events import publish_event
from llmops.queues import job_events_group

__all__ = [
    "FINISHED",
    "PROGRESS",
    "flush_progress",
    "progress_on_commit",
    "publish_finished_on_commit",
]

logger = logging.getLogger("batches.events")

PROGRESS = "batch.progress"
FINISHED = "batch.finished"


def progress_payload(batch: Batch) -> dict[str, Any]:
    return {
        "id": str(batch.id),
        "status": batch.status,
        "total": batch.total,
        "pending": batch.pending,
        "completed": batch.completed,
        "failed": batch.failed,
        "cancelled": batch.cancelled,
    }


def _publish(user_id: int, batch_id: Any, message: dict[str, Any]) -> None:
    try:
        publish_event([job_events_group(user_id)], message, about=f"batch {batch_id}")
    except Exception:
        logger.exception("batch %s %s event failed", batch_id, message["type"])


class _Coalescer:
    """At most one progress event per batch per interval from this process; the newest counters
    of an interval go out at its end (a timer), unless the batch finished meanwhile."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent_at: dict[UUID, float] = {}
        self.waiting: dict[UUID, tuple[int, dict[str, Any]]] = {}
        self.finished: set[UUID] = set()

    def changed(self, batch_id: UUID, user_id: int, payload: dict[str, Any]) -> None:
        interval = settings.LLM_BATCH_PROGRESS_INTERVAL
        now = time.monotonic()
        with self.lock:
            if batch_id in self.finished:
                return
            last = self.sent_at.get(batch_id)
            if last is None or now - last >= interval:
                self.sent_at[batch_id] = now
                self._forget_old(now, interval)
                send = True
            else:
                first_of_interval = batch_id not in self.waiting
                self.waiting[batch_id] = (user_id, payload)
                send = False
                if first_of_interval:
                    timer = threading.Timer(last + interval - now, self.flush, [batch_id])
                    timer.daemon = True
                    timer.start()
        if send:
            _publish(user_id, batch_id, {"type": PROGRESS, "batch": payload})

    def flush(self, batch_id: UUID | None = None) -> None:
        """Send what waits (for one batch, or all) now."""
        with self.lock:
            ids = [batch_id] if batch_id is not None else list(self.waiting)
            due = [(i, self.waiting.pop(i)) for i in ids if i in self.waiting]
            for i, _ in due:
                self.sent_at[i] = time.monotonic()
        for i, (user_id, payload) in due:
            _publish(user_id, i, {"type": PROGRESS, "batch": payload})

    def finish(self, batch_id: UUID) -> None:
        with self.lock:
            self.waiting.pop(batch_id, None)
            self.sent_at.pop(batch_id, None)
            self.finished.add(batch_id)
            if len(self.finished) > 10_000:
                self.finished.clear()  # a late progress of an old batch is harmless

    def _forget_old(self, now: float, interval: float) -> None:
        if len(self.sent_at) > 1_000:
            for i, at in list(self.sent_at.items()):
                if now - at >= interval and i not in self.waiting:
                    del self.sent_at[i]


_coalescer = _Coalescer()


def progress_on_commit(batch: Batch) -> None:
    """The batch's counters as this transaction leaves them, sent (coalesced) once it commits."""
    batch_id, user_id, payload = batch.id, batch.user_id, progress_payload(batch)
    transaction.on_commit(lambda: _coalescer.changed(batch_id, user_id, payload))


def flush_progress(batch_id: UUID | None = None) -> None:
    """Send the progress still waiting for its interval's end (before a process that is about
    to exit, as a forked work horse does, takes its timers with it)."""
    _coalescer.flush(batch_id)


def publish_finished_on_commit(batch: Batch, representation: dict[str, Any]) -> None:
    batch_id, user_id = batch.id, batch.user_id
    message = {"type": FINISHED, "batch": representation}

    def publish() -> None:
        _coalescer.finish(batch_id)
        _publish(user_id, batch_id, message)

    transaction.on_commit(publish)
