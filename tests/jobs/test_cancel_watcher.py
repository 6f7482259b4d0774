"""The process's cancel watcher (jobs/cancellation.py) against the real Redis: one thread for
every call in flight, which must outlive any failure of one of its polls."""

import threading
import uuid

import pytest

from jobs import cancellation
from llmops.queues import LLM_QUEUE, job_cancel_key
from runtime.redis_clients import queue_connection

pytestmark = pytest.mark.redis


class SettingsFailingOnce:
    """Settings whose first read of the poll period fails, as a read did in the suite while
    another thread's test put its settings back."""

    def __init__(self) -> None:
        self.failed = False

    @property
    def LLM_CANCEL_POLL_SECONDS(self) -> float:  # noqa: N802 (a setting's name)
        if not self.failed:
            self.failed = True
            raise AttributeError("LLM_CANCEL_POLL_SECONDS")
        return 0.05


def test_a_cancel_key_ends_the_call_and_a_failed_poll_does_not_stop_the_watcher(monkeypatch):
    flaky = SettingsFailingOnce()
    monkeypatch.setattr(cancellation, "settings", flaky)
    job_id = str(uuid.uuid4())
    cancelled = threading.Event()
    with cancellation.cancel_watched(job_id, cancelled.set):
        cancellation._watcher.wake()
        queue_connection(LLM_QUEUE).set(job_cancel_key(job_id), 1)
        # The watcher's first poll fails; its next one still finds the key.
        assert cancelled.wait(timeout=10), "the watcher died with its failed poll"
    assert flaky.failed
