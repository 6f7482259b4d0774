"""Cancel of a running job, as its worker sees it.

``job_cancel`` marks a running job's row (``cancel_requested_at``, the truth) and, once that
commits, sets the job's cancel key in Redis (the fast path). One watcher thread per worker
process looks for the keys of every call it has in flight, all in one ``MGET`` every
``LLM_CANCEL_POLL_SECONDS``, and cancels the call of each job it finds (its deadline's
``cancel``: the stream stops at its next event, or at once when it waits on its socket). The
heartbeat reads the row as a backstop for a lost key (Redis flushed), and the reconciler ends a
job whose worker died with a cancel pending as cancelled (jobs/services/).
"""

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import transaction

from llmops.queues import LLM_QUEUE, job_cancel_key
from runtime.redis_clients import queue_connection

__all__ = ["cancel_signal_on_commit", "cancel_watched", "cancel_signal_clear"]

logger = logging.getLogger(__name__)

_TTL_SECONDS = 24 * 3600
"""A cancel key outlives any call by far, and never stays for good."""
_FALLBACK_PERIOD_SECONDS = 1.0
"""The watcher's wait after a poll that failed (its period may be what failed to be read)."""


def cancel_signal_on_commit(job_id: object) -> None:
    """Tell the job's worker, once the transaction commits. Best effort: the row says it too."""

    def signal() -> None:
        try:
            queue_connection(LLM_QUEUE).set(job_cancel_key(job_id), 1, ex=_TTL_SECONDS)
        except Exception as exc:
            logger.warning(
                "job %s: cancel key not set (the heartbeat reads the row): %r", job_id, exc
            )
        _watcher.wake()

    transaction.on_commit(signal)


def cancel_signal_clear(job_id: object) -> None:
    try:
        queue_connection(LLM_QUEUE).delete(job_cancel_key(job_id))
    except Exception as exc:
        logger.warning("job %s: cancel key not cleared (it expires): %r", job_id, exc)


class _Watcher:
    """One thread per process: the calls in flight, and one MGET of their keys per poll."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, Callable[[], Any]] = {}
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def add(self, job_id: str, on_cancel: Callable[[], Any]) -> None:
        with self._lock:
            self._calls[job_id] = on_cancel
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="cancel-watcher", daemon=True
                )
                self._thread.start()

    def remove(self, job_id: str) -> None:
        with self._lock:
            self._calls.pop(job_id, None)

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        # Never ends: a poll that fails is logged, and the next one comes a period later. A
        # thread that died here would leave every call of the process without its fast cancel
        # until the next call started one again.
        while True:
            try:
                self._poll()
            except Exception:
                logger.exception("cancel watcher: a poll failed; polling again")
                self._wake.wait(_FALLBACK_PERIOD_SECONDS)

    def _poll(self) -> None:
        self._wake.wait(settings.LLM_CANCEL_POLL_SECONDS)
        self._wake.clear()
        with self._lock:
            calls = dict(self._calls)
        if not calls:
            return
        ids = list(calls)
        try:
            found = queue_connection(LLM_QUEUE).mget([job_cancel_key(i) for i in ids])
        except Exception as exc:
            logger.warning("cancel keys not read: %r", exc)
            return
        for job_id, value in zip(ids, found, strict=True):
            if value is not None:
                cancel_now(job_id, calls[job_id])

    def cancel(self, job_id: str) -> None:
        with self._lock:
            on_cancel = self._calls.get(job_id)
        if on_cancel is not None:
            cancel_now(job_id, on_cancel)


def cancel_now(job_id: str, on_cancel: Callable[[], Any]) -> None:
    logger.info("job %s: cancel requested; ending its call", job_id)
    try:
        on_cancel()
    except Exception:
        logger.exception("job %s: its call could not be cancelled", job_id)


_watcher = _Watcher()


@contextmanager
def cancel_watched(job_id: object, on_cancel: Callable[[], Any]) -> Iterator[Callable[[], None]]:
    """Watch for the job's cancel while the block runs; yields a function that cancels now
    (the heartbeat's, when the row says so)."""
    key = str(job_id)
    _watcher.add(key, on_cancel)
    try:
        yield lambda: _watcher.cancel(key)
    finally:
        _watcher.remove(key)
