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
from jobs.transitions import Transition, on_transition
from llmops.queues import all_jobs_group, job_events_group, job_group

__all__ = ["event_for", "publish_event", "publish_job_event"]

logger = logging.getLogger("jobs.events")

EVENT_TYPE = "job.updated"


_serializer: Any = None


def event_for(job: LlmJob) -> dict[str, Any]:
    """The event's payload: the fields of JobOutputSerializer a live view needs."""
    global _serializer
    if _serializer is None:
        from jobs.apis import JobOutputSerializer

        # One instance for every event: a ModelSerializer builds its fields once per instance,
        # which cost 15 times the rendering itself (0.27 against 0.02 ms). Rendering changes
        # nothing on the instance, so threads share it.
        _serializer = JobOutputSerializer()
    data = _serializer.to_representation(job)
    payload = {
        key: data[key]
        for key in ("id", "status", "attempts", "cost_usd", "next_attempt_at", "error")
    }
    if job.status == LlmJob.Status.COMPLETED or (
        job.status == LlmJob.Status.CANCELLED and job.output_text is not None
    ):
        # A job cancelled mid-call keeps what it streamed.
        payload["output"] = data["output"]
    return {"type": EVENT_TYPE, "job": payload}


class _Sender:
    """One thread per process with its own event loop: events leave in the order they came."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="job-events", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def send(self, groups: list[str], message: dict[str, Any]) -> "Future[None]":
        return asyncio.run_coroutine_threadsafe(self._send(groups, message), self.loop)

    async def _send(self, groups: list[str], message: dict[str, Any]) -> None:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is None:
            return
        # The three groups at once: each group_send waits on two Redis round trips, and one
        # after the other they made the caller wait on six. Order holds: a caller hands over
        # its next event only once this one is in.
        await asyncio.gather(*(layer.group_send(group, message) for group in groups))


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
    return publish_event(groups, message, about=f"job {job.id}")


def publish_event(groups: list[str], message: dict[str, Any], *, about: str) -> bool:
    """Hand any event (a job's, a pipeline's) to the channel layer through this process's one
    sender, in order; False (logged, naming ``about``) when it did not go in time."""
    future = _get_sender().send(groups, message)
    try:
        future.result(timeout=settings.JOB_EVENTS_PUBLISH_TIMEOUT)
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
