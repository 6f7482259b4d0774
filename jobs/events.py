"""Live job events: every committed LlmJob transition publishes one ``job.updated`` event to the
channel layer (the WebSocket ``/ws/jobs/``, jobs/consumers.py).

Publishing is best effort and cheap. A sync caller (an RQ work horse, a web request) only puts
the event on an in-process queue; one sender thread per process, with its own event loop and so
one channel-layer connection pool, hands events to the layer in the order they were committed.
The caller waits at most ``JOB_EVENTS_PUBLISH_TIMEOUT`` for the hand-off, so a channel layer
outage slows a transition by that much at worst and never fails it.
"""

import asyncio
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from django.conf import settings

from jobs.models import LlmJob
from jobs.representation import JobOutputSerializer
from jobs.transitions import Transition, on_transition
from llmops.queues import all_jobs_group, job_events_group, job_group

__all__ = [
    "event_for",
    "event_published",
    "publish_event",
    "publish_event_nowait",
    "publish_job_event",
]

logger = logging.getLogger("jobs.events")

EVENT_TYPE = "job.updated"


_serializer: Any = None


def event_for(job: LlmJob) -> dict[str, Any]:
    """The event's payload: the fields of JobOutputSerializer a live view needs."""
    global _serializer
    if _serializer is None:
        # One instance for every event: a ModelSerializer builds its fields once per instance,
        # which cost 15 times the rendering itself (0.27 against 0.02 ms). Rendering changes
        # nothing on the instance, so threads share it.
        _serializer = JobOutputSerializer()
    data = _serializer.to_representation(job)
    payload = {
        key: data[key]
        for key in (
            "id",
            "status",
            "attempts",
            "cost_usd",
            "next_attempt_at",
            "error",
            "mode",
            "provider_batch",
        )
    }
    if job.status == LlmJob.Status.COMPLETED or (
        job.status == LlmJob.Status.CANCELLED and job.output_text is not None
    ):
        # A job cancelled mid-call keeps what it streamed.
        payload["output"] = data["output"]
    return {"type": EVENT_TYPE, "job": payload}


SEND_CONCURRENCY = 16
"""At most this many events are handed to the channel layer at once (each to its groups at
once): channels-redis's connection pool (redis-py's default, 100 connections) refuses more at
once, and a burst of streaming jobs (a delta 5 times a second from each) otherwise exhausted it
(bench/streaming.py)."""
BATCH_MAX = 512
"""At most this many waiting events are taken at once; the members of every group they name are
read in one round trip (most groups are empty: nobody watches that job), where one round trip
per event cost a sixth of a busy worker's CPU (bench/README.md, agents.py)."""

_Item = tuple[str, list[str], dict[str, Any], "Future[None]"]


class _Sender:
    """One thread per process with its own event loop and one queue: events leave in the order
    they came, those of one subject (a job) one after the other, up to ``SEND_CONCURRENCY``
    subjects at a time."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        # Transitions (their callers wait) before deltas (nobody waits): a job's last delta is
        # out before its final transition is published (jobs/live_output.py ``close``), so
        # one job's events keep their order.
        self.urgent: asyncio.Queue[_Item] = asyncio.Queue()
        self.queue: asyncio.Queue[_Item] = asyncio.Queue()
        self.ready = asyncio.Event()
        self.thread = threading.Thread(target=self._run, name="job-events", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.create_task(self._drain())
        self.loop.run_forever()

    def send(
        self, subject: str, groups: list[str], message: dict[str, Any], *, urgent: bool = True
    ) -> "Future[None]":
        future: Future[None] = Future()
        self.loop.call_soon_threadsafe(
            self._put, self.urgent if urgent else self.queue, (subject, groups, message, future)
        )
        return future

    def _put(self, queue: asyncio.Queue[Any], item: Any) -> None:
        queue.put_nowait(item)
        self.ready.set()

    async def _drain(self) -> None:
        from channels.layers import get_channel_layer

        while True:
            await self.ready.wait()
            # What waits, up to BATCH_MAX events, transitions first; a subject's later events
            # go out in this batch behind its earlier ones.
            batch: list[_Item] = []
            for queue in (self.urgent, self.queue):
                while len(batch) < BATCH_MAX and not queue.empty():
                    batch.append(queue.get_nowait())
            if self.urgent.empty() and self.queue.empty():
                self.ready.clear()
            # One its caller abandoned (it waited too long) is never sent late.
            live = [item for item in batch if item[3].set_running_or_notify_cancel()]
            if not live:
                continue
            try:
                layer = get_channel_layer()
                members = await self._members(layer, live)
            except Exception as exc:  # handed to every caller's future
                for item in live:
                    item[3].set_exception(exc)
                continue
            by_subject: dict[str, list[_Item]] = {}
            for item in live:
                by_subject.setdefault(item[0], []).append(item)
            limit = asyncio.Semaphore(SEND_CONCURRENCY)
            await asyncio.gather(
                *(
                    self._send_in_order(layer, members, items, limit)
                    for items in by_subject.values()
                )
            )

    @staticmethod
    async def _members(layer: Any, items: list[_Item]) -> dict[str, list[str]] | None:
        """The members of every group the batch names, in one round trip (jobs/channel_layer.py);
        None for a layer that cannot say (each event is then sent on its own)."""
        if getattr(layer, "group_members", None) is None:
            return None
        return await layer.group_members(group for item in items for group in item[1])  # type: ignore[no-any-return]

    @staticmethod
    async def _send_in_order(
        layer: Any,
        members: dict[str, list[str]] | None,
        items: list[_Item],
        limit: asyncio.Semaphore,
    ) -> None:
        async with limit:
            for _, groups, message, future in items:
                try:
                    if members is not None:
                        await layer.send_to_members(groups, message, members)
                    elif layer is not None:
                        # The groups at once: one after the other they made the caller wait on
                        # twice as many Redis round trips.
                        await asyncio.gather(*(layer.group_send(g, message) for g in groups))
                except Exception as exc:  # handed to the caller's future
                    future.set_exception(exc)
                else:
                    future.set_result(None)


_sender: _Sender | None = None
_sender_lock = threading.Lock()


def _get_sender() -> _Sender:
    global _sender
    with _sender_lock:
        # A forked work horse inherits the parent's object but not its thread: start its own.
        if _sender is None or _sender.pid != os.getpid() or not _sender.thread.is_alive():
            _sender = _Sender()
        return _sender


def publish_job_event(job: LlmJob) -> bool:
    """Hand the job's event to the channel layer; False (logged) when it did not go in time."""
    message = event_for(job)
    groups = [job_events_group(job.user_id), job_group(job.id), all_jobs_group()]
    return publish_event(groups, message, about=f"job {job.id}", subject=str(job.id))


def publish_event(
    groups: list[str], message: dict[str, Any], *, about: str, subject: str | None = None
) -> bool:
    """Hand any event (a job's, a pipeline's) to the channel layer through this process's one
    sender, in order; False (logged, naming ``about``) when it did not go in time. ``subject``
    (by default ``about``): events of one subject are sent one after the other."""
    future = publish_event_nowait(groups, message, subject=subject or about)
    return event_published(future, about=about, timeout=settings.JOB_EVENTS_PUBLISH_TIMEOUT)


def publish_event_nowait(
    groups: list[str], message: dict[str, Any], *, subject: str, urgent: bool = False
) -> "Future[None]":
    """Queue an event without waiting for it (a streaming job's deltas): the future says how it
    went (``event_published``). ``urgent``: in line with the transitions' events, ahead of
    the deltas."""
    return _get_sender().send(subject, groups, message, urgent=urgent)


def event_published(future: "Future[None]", *, about: str, timeout: float) -> bool:
    """Whether a queued event went out, waiting at most ``timeout``; one that did not is
    abandoned (never sent late, out of order) and logged."""
    try:
        future.result(timeout=timeout)
    except Exception as exc:
        # Timeout or layer error: the event is lost, the job is not. The sender keeps order,
        # so a slow hand-off is abandoned rather than overtaken by the next event.
        future.cancel()
        logger.warning("%s event not published: %r", about, exc)
        return False
    return True


def publish_transition(job: LlmJob, transition: Transition) -> None:
    try:
        publish_job_event(job)
    except Exception:
        logger.exception("job %s event for %s failed", job.id, transition.value)


def publish_transitions(jobs: Sequence[LlmJob], transition: Transition) -> None:
    """Many jobs at once (a batch's submit, jobs/bulk.py) publish no per-job event: ten
    thousand would overflow every listener's channel (channels-redis drops what passes
    CHANNEL_LAYER_CAPACITY, 1,000) and hold the caller for seconds of hand-offs. Whoever made
    them publishes one event of its own (a batch its ``batch.progress``)."""


on_transition(publish_transition, many=publish_transitions)
