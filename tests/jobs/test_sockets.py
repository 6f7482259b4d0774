"""How long a /ws/jobs/ socket lives and what it may keep: open through hours of silence and a
Redis restart, closed within seconds of losing its access, bounded in bytes and in number.

The real web server (the Procfile's line, tests/conftest.py ``web_server``) with a real
``websockets`` client wherever the server's own behaviour is the point (timeouts, TCP
backpressure); Channels' WebsocketCommunicator on the real stack for the rest."""

import copy
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.utils import timezone

from jobs.consumers import (
    CLOSE_FORBIDDEN,
    CLOSE_TOO_FAR_BEHIND,
    CLOSE_TOO_MANY_CONNECTIONS,
    CLOSE_UNAUTHENTICATED,
)
from jobs.events import publish_event, publish_job_event
from keys.models import ApiKey
from keys.services import api_key_revoke, api_key_rotate
from keys.testing import api_key_for
from llmops.asgi import application
from llmops.queues import job_events_group
from tests.conftest import make_user, submit, web_server
from tests.test_loops import PrivateRedis, private_redis  # noqa: F401  (fixture)

websockets = pytest.importorskip("websockets.sync.client")
ConnectionClosed = pytest.importorskip("websockets.exceptions").ConnectionClosed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

FINAL = ("completed", "failed", "cancelled")
REAUTH_SECONDS = 0.5


def _key(user: Any) -> str:
    return api_key_for(user)


def _ws_url(http_url: str, query: str = "") -> str:
    return http_url.replace("http://", "ws://") + "/ws/jobs/" + query


def _statuses_until_final(ws: Any, job_id: str, *, timeout: float = 15) -> list[str]:
    statuses: list[str] = []
    while not statuses or statuses[-1] not in FINAL:
        event = json.loads(ws.recv(timeout=timeout))
        if event["type"] == "job.updated" and event["job"]["id"] == job_id:
            statuses.append(event["job"]["status"])
    return statuses


@pytest.fixture
def fast_reauth(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """Re-checks every half second, in this process and in the web server started after it."""
    monkeypatch.setenv("WS_REAUTH_SECONDS", str(REAUTH_SECONDS))
    settings.WS_REAUTH_SECONDS = REAUTH_SECONDS


def _quiet_then_hears_a_job(alice: Any, alice_client: Any, workers: Any, url: str, quiet: float):
    with websockets.connect(
        _ws_url(url), subprotocols=["token", _key(alice)], open_timeout=10
    ) as ws:
        try:  # silence, the socket still open
            heard = ws.recv(timeout=quiet)
        except TimeoutError:
            pass
        else:  # (once under parallel load: say what came, and from where)
            pytest.fail(f"the quiet socket of user {alice.id} heard {heard!r}")
        job = submit(alice_client)
        workers.drain()
        assert _statuses_until_final(ws, str(job.id)) == ["queued", "running", "completed"]


def test_a_quiet_socket_stays_open_four_times_the_read_timeout_and_still_hears_a_job(
    alice, alice_client, workers, asgi_server
):
    """The fault: redis-py's 5 s read timeout cut channels-redis's 5 s blocking receive, and
    every socket died about five seconds after it went quiet. 20 s of silence here; two
    minutes in make test-long (below)."""
    _quiet_then_hears_a_job(alice, alice_client, workers, asgi_server, quiet=20)


@pytest.mark.long  # two minutes of real time: make test-long (make test keeps 20 s, above)
def test_a_quiet_socket_stays_open_for_two_minutes_and_still_hears_a_job(
    alice, alice_client, workers, asgi_server
):
    _quiet_then_hears_a_job(alice, alice_client, workers, asgi_server, quiet=120)


def test_a_socket_rejoins_its_group_after_a_redis_restart_and_is_told_to_catch_up(
    alice,
    alice_client,
    settings,
    fast_reauth,
    private_redis: PrivateRedis,  # noqa: F811
):
    layers = copy.deepcopy(settings.CHANNEL_LAYERS)  # the production options, on that Redis
    layers["default"]["CONFIG"]["hosts"][0]["address"] = private_redis.url
    settings.CHANNEL_LAYERS = layers
    job = submit(alice_client)

    async def scenario() -> None:
        key = await sync_to_async(_key)(alice)
        comm = WebsocketCommunicator(application, "/ws/jobs/", subprotocols=["token", key])
        assert (await comm.connect())[0]
        await sync_to_async(private_redis.kill)()  # a restart without persistence: groups lost
        await sync_to_async(private_redis.start)()
        event = await comm.receive_json_from(timeout=20)
        assert event == {"type": "resync"}
        assert await sync_to_async(publish_job_event)(job)
        event = await comm.receive_json_from(timeout=10)
        assert event["job"]["id"] == str(job.id)
        await comm.disconnect()

    async_to_sync(scenario)()


def _revoke(what: str, user: Any) -> None:
    if what == "key revoked":
        for key in ApiKey.objects.filter(user=user):
            api_key_revoke(key=key)
    elif what == "key expired":
        ApiKey.objects.filter(user=user).update(expires_at=timezone.now())
    elif what == "key rotated, grace over":
        for key in ApiKey.objects.filter(user=user):
            api_key_rotate(key=key, grace_seconds=0)
    elif what == "jobs:read scope removed":
        ApiKey.objects.filter(user=user).update(scopes=["jobs:write"])
    elif what == "user deactivated":
        user.is_active = False
        user.save(update_fields=["is_active"])
    else:
        user.user_permissions.remove(Permission.objects.get(codename="view_llmjob"))


@pytest.mark.parametrize(
    ("what", "code"),
    [
        ("key revoked", CLOSE_UNAUTHENTICATED),
        ("key expired", CLOSE_UNAUTHENTICATED),
        ("key rotated, grace over", CLOSE_UNAUTHENTICATED),
        ("jobs:read scope removed", CLOSE_FORBIDDEN),
        ("user deactivated", CLOSE_UNAUTHENTICATED),
        ("view_llmjob removed", CLOSE_FORBIDDEN),
    ],
)
def test_a_socket_loses_what_its_user_lost_within_seconds(
    fast_reauth, bob, bob_client, asgi_server, what: str, code: int
):
    """A staff member watching every job (?all=1) with an API key: once the key (revoked,
    expired, its secret rotated away), its scope, the account or the permission is gone, the
    socket closes within a few seconds and hears no more output."""
    olga = make_user("olga", "view_llmjob", is_staff=True)
    job = submit(bob_client)
    with websockets.connect(
        _ws_url(asgi_server, "?all=1"), subprotocols=["token", _key(olga)], open_timeout=10
    ) as ws:
        assert publish_job_event(job)
        assert json.loads(ws.recv(timeout=10))["job"]["id"] == str(job.id)
        _revoke(what, olga)
        revoked = time.monotonic()
        heard_after = []
        with pytest.raises(ConnectionClosed) as closed:
            while (took := time.monotonic() - revoked) < REAUTH_SECONDS + 10:
                # Bob's job keeps talking; the socket may hear what was sent before the check.
                publish_job_event(job)
                try:
                    heard_after.append((took, ws.recv(timeout=0.2)))
                except TimeoutError:
                    pass  # nothing within 0.2 s (a loaded machine, or no longer sent): go on
        took = time.monotonic() - revoked
    assert closed.value.rcvd is not None and closed.value.rcvd.code == code
    assert took < REAUTH_SECONDS + 3, took
    late = [at for at, _ in heard_after if at > REAUTH_SECONDS + 1]
    assert late == [], f"output heard {late} s after the revocation"


def test_a_session_socket_closes_when_its_session_is_logged_out(alice, client, fast_reauth):
    client.force_login(alice)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()

    async def scenario() -> Any:
        comm = WebsocketCommunicator(
            application,
            "/ws/jobs/",
            headers=[(b"origin", b"http://localhost"), (b"cookie", cookie)],
        )
        assert (await comm.connect())[0]
        assert await comm.receive_nothing(timeout=REAUTH_SECONDS * 3)  # still open
        await sync_to_async(client.logout)()
        return await comm.receive_output(timeout=REAUTH_SECONDS + 3)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}


def test_one_socket_more_than_the_users_limit_is_closed_4429(alice, bob, settings):
    settings.WS_MAX_CONNECTIONS_PER_USER = 2

    async def open_for(user: Any) -> tuple[WebsocketCommunicator, Any]:
        key = await sync_to_async(_key)(user)
        comm = WebsocketCommunicator(application, "/ws/jobs/", subprotocols=["token", key])
        assert (await comm.connect())[0]
        if await comm.receive_nothing(timeout=0.3):
            return comm, "open"
        return comm, (await comm.receive_output())["code"]

    async def scenario() -> list[Any]:
        first, second = await open_for(alice), await open_for(alice)
        third = await open_for(alice)
        bobs = await open_for(bob)  # the limit is per user
        await first[0].disconnect()
        fourth = await open_for(alice)  # a closed socket frees its place
        for comm, _ in (second, bobs, fourth):
            await comm.disconnect()
        return [first[1], second[1], third[1], bobs[1], fourth[1]]

    seen = async_to_sync(scenario)()
    assert seen == ["open", "open", CLOSE_TOO_MANY_CONNECTIONS, "open", "open"]


@pytest.fixture
def small_outbox_server(
    monkeypatch: pytest.MonkeyPatch, transactional_db: None, tmp_path: Path
) -> Iterator[tuple[str, Path]]:
    monkeypatch.setenv("WS_MAX_QUEUED_BYTES", str(256 * 1024))
    log = tmp_path / "web.log"
    with web_server(workers=1, log=log) as url:
        yield url, log


def _frames(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(opcode, payload) of each unmasked frame a server sent, in order."""
    at = 0
    while at + 2 <= len(data):
        opcode, length = data[at] & 0x0F, data[at + 1] & 0x7F
        at += 2
        if length == 126:
            length, at = int.from_bytes(data[at : at + 2], "big"), at + 2
        elif length == 127:
            length, at = int.from_bytes(data[at : at + 8], "big"), at + 8
        yield opcode, data[at : at + length]
        at += length


def test_a_client_that_reads_too_slowly_is_closed_4413_not_buffered(alice, small_outbox_server):
    """Completion events of ~85 KB to a client that stops reading: the server's queue for it stops
    at WS_MAX_QUEUED_BYTES and the socket is closed, instead of holding them all in memory."""
    url, log = small_outbox_server
    sock = socket.socket()
    # A small receive window: the server's buffers fill after a few events, not a few megabytes.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    sock.sendall(
        b"GET /ws/jobs/ HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Protocol: token, " + _key(alice).encode() + b"\r\n\r\n"
    )
    sock.settimeout(10)
    handshake = b""
    while b"\r\n\r\n" not in handshake:
        handshake += sock.recv(1)
    assert handshake.startswith(b"HTTP/1.1 101"), handshake
    big = {"id": "0", "status": "completed", "output": {"text": "x" * 85_000}}
    sent = 120  # about 10 MB: more than the kernel's buffers (4 MB each way) and the bound
    for _ in range(sent):  # and the client reads none of it meanwhile
        assert publish_event(
            [job_events_group(alice.id)], {"type": "job.updated", "job": big}, about="test"
        )
    deadline = time.monotonic() + 30
    while "reads too slowly" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)
    received = b""
    while chunk := sock.recv(1 << 20):
        received += chunk
    sock.close()
    frames = list(_frames(received))
    assert frames[-1][0] == 0x8  # a close frame ends it
    assert int.from_bytes(frames[-1][1][:2], "big") == CLOSE_TOO_FAR_BEHIND
    heard = len(frames) - 1
    assert heard < sent, heard
