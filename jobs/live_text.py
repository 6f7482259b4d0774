"""A streaming job's partial text as Redis keeps it while its attempt runs: read by the API
(jobs/selectors.py) and the live socket, written by jobs/live_output.py, cleared when the
attempt ends. Only Redis: nothing here publishes an event."""

import logging
from typing import Any

from redis.exceptions import RedisError

from llmops.queues import LLM_QUEUE, job_cancel_key, job_partial_attempt_key, job_partial_text_key
from runtime.redis_clients import queue_connection

__all__ = [
    "TTL_SECONDS",
    "live_keys_clear",
    "live_text_redis",
    "partial_text",
    "partial_text_clear",
    "running_text",
]

logger = logging.getLogger(__name__)

TTL_SECONDS = 24 * 3600
"""A partial text outlives its job's run by a day at most, whatever happened to the worker."""


def live_text_redis() -> Any:
    return queue_connection(LLM_QUEUE)


def partial_text(job_id: object) -> tuple[int, str] | None:
    """The text the job's current attempt has streamed so far, with that attempt's number;
    None when there is none (not streaming, or Redis cannot say)."""
    try:
        attempt, text = live_text_redis().mget(
            job_partial_attempt_key(job_id), job_partial_text_key(job_id)
        )
    except RedisError as exc:
        logger.warning("job %s: partial text not read: %r", job_id, exc)
        return None
    if attempt is None:
        return None
    return int(attempt), (text or b"").decode("utf-8", errors="replace")


def running_text(job_id: object, attempt: int) -> str:
    """What the running ``attempt`` of the job has streamed so far ("" when nothing is kept for
    it: not started, an earlier attempt's, or Redis away)."""
    kept = partial_text(job_id)
    return kept[1] if kept is not None and kept[0] == attempt else ""


def partial_text_clear(job_id: object) -> None:
    try:
        live_text_redis().delete(job_partial_text_key(job_id), job_partial_attempt_key(job_id))
    except RedisError as exc:
        logger.warning("job %s: partial text not cleared: %r", job_id, exc)


def live_keys_clear(job_id: object) -> None:
    """An attempt is over: its partial text and its cancel key go, in one round trip (both
    expire on their own if Redis is away)."""
    try:
        live_text_redis().delete(
            job_partial_text_key(job_id), job_partial_attempt_key(job_id), job_cancel_key(job_id)
        )
    except RedisError as exc:
        logger.warning("job %s: live keys not cleared: %r", job_id, exc)
