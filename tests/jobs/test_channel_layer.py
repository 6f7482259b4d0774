"""The channel layer's send to several groups (jobs/channel_layer.py ``group_send_many``) against
channels-redis's own ``group_send`` as the control, on the real Redis: the same members get the
same messages, expired members and messages are dropped, a full channel gets nothing, and an
event nobody watches is one round trip."""

import asyncio
import time
from typing import Any

import pytest
from channels_redis.core import RedisChannelLayer as UpstreamLayer
from django.conf import settings
from redis.asyncio.client import Pipeline as AsyncPipeline
from redis.asyncio.client import Redis as AsyncRedis

from jobs.channel_layer import RedisChannelLayer

pytestmark = pytest.mark.redis


def _layers(**config: Any) -> tuple[RedisChannelLayer, UpstreamLayer]:
    base = {**settings.CHANNEL_LAYERS["default"]["CONFIG"], **config}
    ours = RedisChannelLayer(**{**base, "prefix": base["prefix"] + "ours:"})
    upstream = UpstreamLayer(**{**base, "prefix": base["prefix"] + "upstream:"})
    return ours, upstream


async def _receive_all(layer: Any, channel: str) -> list[dict[str, Any]]:
    got = []
    while True:
        try:
            got.append(await asyncio.wait_for(layer.receive(channel), timeout=0.3))
        except TimeoutError:
            return got


async def _scenario(layer: Any, send: Any) -> dict[str, Any]:
    """Three groups: two members in ``a`` (one also in ``b``), none in ``empty``; a member of
    ``a`` whose membership expired; a channel at capacity. Each channel's messages after one
    send to all three groups."""
    # Channels of their own (a process's new_channel() names share one Redis key).
    alice, bob, gone, full = "t.alice", "t.bob", "t.gone", "t.full"
    await layer.group_add("a", alice)
    await layer.group_add("a", bob)
    await layer.group_add("b", bob)
    await layer.group_add("b", full)
    await layer.group_add("a", gone)
    # ``gone`` joined a day and a second ago: past group_expiry.
    connection = layer.connection(layer.consistent_hash("a"))
    await connection.zadd(layer._group_key("a"), {gone: int(time.time()) - 86401})
    for index in range(layer.capacity):
        await layer.send(full, {"type": "filler", "n": index})
    await send(["a", "b", "empty"], {"type": "job.updated", "job": {"id": "1"}})
    members_left = sorted(
        name.decode() for name in await connection.zrange(layer._group_key("a"), 0, -1)
    )
    received = {
        "alice": await _receive_all(layer, alice),
        "bob": await _receive_all(layer, bob),
        "gone": await _receive_all(layer, gone),
        "full": [m for m in await _receive_all(layer, full) if m["type"] != "filler"],
    }
    await layer.flush()
    return {"received": received, "a_members": len(members_left)}


async def _upstream_send(layer: UpstreamLayer, groups: list[str], message: dict[str, Any]) -> None:
    for group in groups:
        await layer.group_send(group, message)


def test_it_delivers_what_channels_redis_delivers() -> None:
    ours, upstream = _layers(capacity=3)

    async def both() -> tuple[dict[str, Any], dict[str, Any]]:
        mine = await _scenario(ours, ours.group_send_many)
        theirs = await _scenario(upstream, lambda g, m: _upstream_send(upstream, g, m))
        return mine, theirs

    mine, theirs = asyncio.run(both())
    assert mine == theirs
    event = {"type": "job.updated", "job": {"id": "1"}}
    assert mine["received"] == {"alice": [event], "bob": [event, event], "gone": [], "full": []}
    assert mine["a_members"] == 2  # the expired member was dropped


def test_a_channels_expired_messages_are_dropped_before_it_is_counted_full() -> None:
    """A channel filled to capacity with messages past their expiry takes the new one."""
    ours, _ = _layers(capacity=2, expiry=5)

    async def run() -> list[dict[str, Any]]:
        channel = "t.stale"
        await ours.group_add("g", channel)
        key = ours.prefix + channel
        connection = ours.connection(ours.consistent_hash(channel))
        old = time.time() - 60
        await connection.zadd(key, {b"stale-1": old, b"stale-2": old})
        await ours.group_send_many(["g"], {"type": "fresh"})
        got = await _receive_all(ours, channel)
        await ours.flush()
        return got

    assert asyncio.run(run()) == [{"type": "fresh"}]


def test_an_event_nobody_watches_is_one_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    ours, _ = _layers()
    sent: list[str] = []
    execute_command = AsyncRedis.execute_command
    execute = AsyncPipeline.execute

    async def command(self: Any, *args: Any, **options: Any) -> Any:
        sent.append(f"command {args[0]}")
        return await execute_command(self, *args, **options)

    async def pipeline(self: Any, *args: Any, **options: Any) -> Any:
        sent.append(f"pipeline of {len(self.command_stack)}")
        return await execute(self, *args, **options)

    async def run() -> None:
        await ours.new_channel()  # the layer's connection made before counting
        monkeypatch.setattr(AsyncRedis, "execute_command", command)
        monkeypatch.setattr(AsyncPipeline, "execute", pipeline)
        await ours.group_send_many(["nobody-1", "nobody-2", "nobody-3"], {"type": "x"})
        monkeypatch.undo()
        await ours.flush()

    asyncio.run(run())
    assert sent == ["pipeline of 6"]  # upstream: 6 commands, one round trip each


def test_a_burst_of_events_reads_its_groups_in_one_round_trip_and_keeps_each_subjects_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process's event sender (jobs/events.py) takes every event waiting at once: 300 events
    of 30 jobs, one of them watched, read their groups' members in one pipeline, and the
    watcher gets that job's events in the order they were queued."""
    import threading

    from channels.layers import get_channel_layer

    from jobs import events

    layer = get_channel_layer()
    watcher = "t.burst-watcher"
    pipelines: list[int] = []
    execute = AsyncPipeline.execute

    async def pipeline(self: Any, *args: Any, **options: Any) -> Any:
        pipelines.append(len(self.command_stack))
        return await execute(self, *args, **options)

    async def watch() -> None:
        await layer.group_add("burst-job-7", watcher)

    asyncio.run(watch())
    sender = events._get_sender()
    gate = threading.Event()
    sender.loop.call_soon_threadsafe(gate.wait, 10)  # the sender's loop waits: events pile up
    monkeypatch.setattr(AsyncPipeline, "execute", pipeline)
    futures = [
        events.publish_event_nowait(
            [f"burst-job-{n % 30}", "burst-all"], {"type": "x", "n": n}, subject=f"job {n % 30}"
        )
        for n in range(300)
    ]
    gate.set()
    for future in futures:
        future.result(timeout=10)
    monkeypatch.undo()

    async def received() -> list[Any]:
        got = await _receive_all(layer, watcher)
        await layer.group_discard("burst-job-7", watcher)
        return got

    assert [m["n"] for m in asyncio.run(received())] == list(range(7, 300, 30))
    # One read of the 31 groups' members (two commands each); the watched group's ten sends
    # are scripts, not pipelines.
    assert pipelines == [62]
