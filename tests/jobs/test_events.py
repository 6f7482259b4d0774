"""Live job events over the real ASGI stack (llmops.asgi.application) with channels-redis on the
test's Redis index: Channels' WebsocketCommunicator, real RQ workers, the real fake provider.

Each scenario is one coroutine run by async_to_sync; its ORM calls and worker drains go through
sync_to_async, which runs them back on the test's own thread (one database connection)."""

import asyncio
import socket
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from jobs.events import publish_job_event
from keys.testing import api_key_for
from llmops.asgi import application
from tests.conftest import make_user, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

FINAL = ("completed", "failed", "cancelled")


def _key(user: Any) -> str:
    return api_key_for(user)


def _session_cookie(client: Any) -> bytes:
    return f"sessionid={client.cookies['sessionid'].value}".encode()


class _Communicator(WebsocketCommunicator):  # type: ignore[misc]
    async def connect(self, timeout: float = 10) -> Any:
        # Channels' one second is not enough for a handshake (a key's check, the groups' joins)
        # on a loaded 2-core machine; a connect cut short there raised out of async_to_sync,
        # whose clean-up then waits for the consumer task it cancels: a CI run hung there.
        return await super().connect(timeout)

    async def disconnect(self, code: int = 1000, timeout: float = 10) -> None:
        # The consumer's clean-up may cancel its channel-layer receive again for a while
        # (jobs/channel_layer.py); Channels' one second cut it short on a loaded machine and
        # left the layer's receive lock held by a closed event loop, for the next socket.
        await super().disconnect(code, timeout)


def communicator(path: str = "/ws/jobs/", *, key: str | None = None, **kw: Any) -> Any:
    if key is not None:
        kw["subprotocols"] = ["token", key]
    return _Communicator(application, path, **kw)


async def until_final(comm: Any, *, timeout: float = 5) -> list[dict[str, Any]]:
    """The ``job.updated`` events up to a final one (the ``job.delta`` text events between them
    are tests/jobs/test_streaming.py's)."""
    events: list[dict[str, Any]] = []
    while not events or events[-1]["job"]["status"] not in FINAL:
        event = await receive_update(comm, timeout=timeout)
        events.append(event)
    return events


async def receive_update(comm: Any, *, timeout: float = 5) -> dict[str, Any]:
    """The next event that is not a ``job.delta``."""
    while True:
        event: dict[str, Any] = await comm.receive_json_from(timeout=timeout)
        if event["type"] != "job.delta":
            return event


def test_it_streams_submit_retry_and_completion_in_order(
    alice, alice_client, workers, fake_provider
):
    async def scenario() -> list[dict[str, Any]]:
        comm = communicator(key=await sync_to_async(_key)(alice))
        connected, subprotocol = await comm.connect()
        assert connected and subprotocol == "token"
        await sync_to_async(fake_provider.faults)({"529": 1.0})
        job = await sync_to_async(submit)(alice_client)
        await sync_to_async(workers.work_once)()
        await sync_to_async(fake_provider.faults)({})
        await sync_to_async(workers.drain)()
        events = await until_final(comm)
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()
        assert {e["job"]["id"] for e in events} == {str(job.id)}
        return events

    events = async_to_sync(scenario)()
    assert [e["job"]["status"] for e in events] == [
        "queued",
        "running",
        "retrying",
        "running",
        "completed",
    ]
    assert [e["job"]["attempts"] for e in events] == [0, 1, 1, 2, 2]
    assert all(e["type"] == "job.updated" for e in events)
    retry, done = events[2]["job"], events[-1]["job"]
    assert retry["error"]["code"] == "overloaded" and retry["next_attempt_at"]
    assert done["output"]["text"] and float(done["cost_usd"]) > 0
    assert "output" not in events[0]["job"]
    assert set(events[0]["job"]) == {
        "id",
        "status",
        "attempts",
        "cost_usd",
        "next_attempt_at",
        "error",
        "mode",
        "provider_batch",
    }


def test_a_user_never_receives_another_users_events(alice, bob, alice_client, bob_client, workers):
    async def scenario() -> None:
        bob_socket = communicator(key=await sync_to_async(_key)(bob))
        assert (await bob_socket.connect())[0]
        alice_socket = communicator(key=await sync_to_async(_key)(alice))
        assert (await alice_socket.connect())[0]
        job = await sync_to_async(submit)(alice_client)
        await sync_to_async(workers.drain)()
        assert {e["job"]["id"] for e in await until_final(alice_socket)} == {str(job.id)}
        assert await bob_socket.receive_nothing(timeout=0.5)
        bobs = await sync_to_async(submit)(bob_client)
        assert (await receive_update(bob_socket))["job"]["id"] == str(bobs.id)
        assert await alice_socket.receive_nothing(timeout=0.3)
        await alice_socket.disconnect()
        await bob_socket.disconnect()

    async_to_sync(scenario)()


def test_wrong_token_and_anonymous_are_refused(alice):
    async def scenario() -> None:
        connected, code = await communicator(key="0" * 40).connect()
        assert not connected and code == 4401
        origin = [(b"origin", b"http://localhost")]
        connected, code = await communicator(headers=origin).connect()
        assert not connected and code == 4401
        assert not (await communicator().connect())[0]  # no Origin, no token: refused too

    async_to_sync(scenario)()


def test_a_session_cookie_from_our_origin_connects_and_a_foreign_origin_is_refused(alice, client):
    client.force_login(alice)
    cookie = _session_cookie(client)

    async def scenario() -> None:
        ours = communicator(headers=[(b"cookie", cookie), (b"origin", b"http://localhost")])
        connected, subprotocol = await ours.connect()
        assert connected and subprotocol is None
        await ours.disconnect()
        theirs = communicator(headers=[(b"cookie", cookie), (b"origin", b"http://evil.example")])
        assert not (await theirs.connect())[0]

    async_to_sync(scenario)()


def test_job_narrows_to_one_of_the_users_jobs(alice, bob, alice_client, workers):
    first = submit(alice_client)

    async def scenario() -> None:
        key = await sync_to_async(_key)(alice)
        comm = communicator(f"/ws/jobs/?job={first.id}", key=key)
        assert (await comm.connect())[0]
        second = await sync_to_async(submit)(alice_client)
        await sync_to_async(workers.drain)()
        events = await until_final(comm)
        assert {e["job"]["id"] for e in events} == {str(first.id)}
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()
        connected, code = await communicator(
            f"/ws/jobs/?job={second.id}", key=await sync_to_async(_key)(bob)
        ).connect()
        assert not connected and code == 4404
        connected, code = await communicator("/ws/jobs/?job=nope", key=key).connect()
        assert not connected and code == 4404

    async_to_sync(scenario)()


def test_all_is_for_staff_who_may_read_every_job(alice, bob_client):
    # Staff without jobs.view_llmjob are refused too: tests/test_authorization.py.
    staff = make_user("sam", "view_llmjob", is_staff=True)

    async def scenario() -> None:
        connected, code = await communicator(
            "/ws/jobs/?all=1", key=await sync_to_async(_key)(alice)
        ).connect()
        assert not connected and code == 4403
        comm = communicator("/ws/jobs/?all=1", key=await sync_to_async(_key)(staff))
        assert (await comm.connect())[0]
        job = await sync_to_async(submit)(bob_client)
        assert (await receive_update(comm))["job"]["id"] == str(job.id)
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_channel_layer_outage_does_not_fail_or_slow_jobs(alice_client, workers, settings):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # bound, never listening: connections are refused
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [f"redis://127.0.0.1:{closed}/0"]},
            }
        }
        started = time.monotonic()
        job = submit(alice_client)
        assert publish_job_event(job) is False
        workers.drain()
        job.refresh_from_db()
    assert job.status == "completed"
    # Four transitions and one direct publish, each bounded by the 1 s publish timeout.
    assert time.monotonic() - started < 5 * settings.JOB_EVENTS_PUBLISH_TIMEOUT + 5


def test_it_streams_through_a_real_server_to_a_real_websocket_client(
    alice, alice_client, workers, asgi_server
):
    websockets = pytest.importorskip("websockets.sync.client")
    url = asgi_server.replace("http://", "ws://") + "/ws/jobs/"
    key = _key(alice)
    with websockets.connect(url, subprotocols=["token", key], open_timeout=10) as ws:
        assert ws.subprotocol == "token"
        job = submit(alice_client)
        workers.drain()
        import json

        statuses = []
        while not statuses or statuses[-1] not in FINAL:
            event = json.loads(ws.recv(timeout=10))
            if event["type"] == "job.delta":
                assert event["job"] == str(job.id)
                continue
            assert event["job"]["id"] == str(job.id)
            statuses.append(event["job"]["status"])
    assert statuses == ["queued", "running", "completed"]
    with pytest.raises(websockets.InvalidStatus):
        websockets.connect(url, subprotocols=["token", "bad"], open_timeout=10)


def test_every_socket_task_ends_when_cancelled_even_mid_receive(alice):
    """A server shutting down (or a test's loop closing) cancels every socket's tasks. redis-py
    can swallow a cancellation that lands as channels-redis's blocking BZPOPMIN answers
    (redis/redis-py#2028), and the receive then polled forever: the loop never closed. The race
    is narrow; before the fix one round in twenty or so hung."""

    async def scenario() -> None:
        for _ in range(60):
            for kw in ({"key": "0" * 40}, {"headers": [(b"origin", b"http://localhost")]}, {}):
                assert not (await communicator(**kw).connect())[0]
            me = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not me]
            for task in pending:
                task.cancel()
            _, stuck = await asyncio.wait(pending, timeout=15)
            assert not stuck, [_awaiting(task) for task in stuck]

    async_to_sync(scenario)()


def _awaiting(task: asyncio.Task[Any]) -> list[str]:
    """Where a task waits: each coroutine of its chain, outermost first."""
    chain, coro = [repr(task)[:120]], task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None)
        if frame is None:
            chain.append(repr(coro)[:160])
            break
        chain.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None)
    return chain
