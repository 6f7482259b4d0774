"""A streaming job's live text (jobs/live_output.py) and the one sender every live event of a
process goes through (jobs/events.py): a lost delta comes again from its own offset, and a
hundred threads publishing at once lose nothing (bench/streaming.py found 1,720 of 3,461 events
lost to channels-redis's connection cap before the sender sent at most 16 at once)."""

import asyncio
import threading
import uuid
from concurrent.futures import Future
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from jobs import live_output
from jobs.events import publish_event
from jobs.live_output import LiveOutput, partial_text

pytestmark = pytest.mark.redis


def test_a_delta_that_did_not_go_out_is_sent_again_from_its_offset(monkeypatch, settings):
    settings.LLM_DELTA_INTERVAL_SECONDS = 0  # every piece is flushed at once
    sent: list[dict[str, Any]] = []

    def publish(groups: list[str], message: dict[str, Any], *, subject: str) -> Future[None]:
        future: Future[None] = Future()
        if len(sent) == 1 and not getattr(publish, "failed", False):
            publish.failed = True  # type: ignore[attr-defined]
            future.set_exception(ConnectionError("the channel layer is away"))
        else:
            future.set_result(None)
        sent.append(message)
        return future

    monkeypatch.setattr(live_output, "publish_event_nowait", publish)
    job_id = uuid.uuid4()
    live = LiveOutput(job_id=job_id, user_id=1, attempt=1)
    for piece in ("Hello, ", "wörld ", "🙂 and ", "more."):
        live(piece)
    live.close()
    # The second delta was lost: the third carries its text again, from the same offset.
    assert [(m["offset"], m["text"]) for m in sent] == [
        (0, "Hello, "),
        (7, "wörld "),
        (7, "wörld 🙂 and "),
        (19, "more."),
    ]
    delivered = [m for i, m in enumerate(sent) if i != 1]
    text = ""
    for message in delivered:
        assert message["offset"] == len(text)
        text += message["text"]
    assert text == "Hello, wörld 🙂 and more."
    # The partial text in Redis has every piece once, whatever the channel layer did.
    assert partial_text(job_id) == (1, text)


def test_a_hundred_threads_publishing_at_once_lose_no_event(settings):
    settings.JOB_EVENTS_PUBLISH_TIMEOUT = 10.0
    group = f"test-burst-{uuid.uuid4().hex}"
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    results: list[bool] = []
    lock = threading.Lock()

    def publish(i: int) -> None:
        for n in range(3):
            ok = publish_event(
                [group, f"{group}-a", f"{group}-b"],
                {"type": "job.updated", "job": {"i": i, "n": n}},
                about=f"test {i}",
            )
            with lock:
                results.append(ok)

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 300 and all(results), results.count(False)

    async def received() -> list[dict[str, Any]]:
        got = []
        for _ in range(300):
            got.append(await asyncio.wait_for(layer.receive(channel), 10))
        return got

    messages = async_to_sync(received)()
    assert len({(m["job"]["i"], m["job"]["n"]) for m in messages}) == 300
    # Each thread's three events arrived in the order it published them.
    by_thread: dict[int, list[int]] = {}
    for message in messages:
        by_thread.setdefault(message["job"]["i"], []).append(message["job"]["n"])
    assert all(order == [0, 1, 2] for order in by_thread.values())
