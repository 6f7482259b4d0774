"""The WebSocket rows of the authorization table (tests/test_authorization.py), through the real
Channels stack (llmops.asgi.application, channels-redis on the test's Redis index).

Apart from the table's other rows because the consumer reads the database on a connection of its
own: its world is committed (a transactional test), which cannot happen while the HTTP rows'
world is open in its rolled-back transaction.
"""

from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from jobs.events import publish_job_event
from keys.scopes import ALL_SCOPES, JOBS_READ
from keys.testing import api_key_for
from llmops.asgi import application
from tests.authorization_world import ACTORS, build_world
from tests.test_authorization import SCOPE_OF, Door, grant, rows_of


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
@pytest.mark.parametrize("door", rows_of("ws"))
def test_websocket_door(door: Door) -> None:
    world = grant(build_world(), door)  # committed: the consumer reads on its own connection
    job = world.objects["failed"]
    path = world.path(door.what)

    async def connect(actor: str) -> object:
        kwargs: dict[str, Any] = {}
        if actor in world.tokens:
            kwargs["subprotocols"] = ["token", world.tokens[actor]]
        else:  # a page of ours in a browser, with no session
            kwargs["headers"] = [(b"origin", b"http://localhost")]
        comm = WebsocketCommunicator(application, path, **kwargs)
        # Ten seconds, not Channels' one, on a loaded machine (tests/jobs/test_events.py).
        connected, code = await comm.connect(timeout=10)
        if not connected:
            return code
        await sync_to_async(publish_job_event)(job)
        heard = not await comm.receive_nothing(timeout=1)
        if heard:
            assert (await comm.receive_json_from())["job"]["id"] == str(job.id)
        await comm.disconnect()
        return "open+" if heard else "open-"

    async def every_actor() -> dict[str, object]:
        return {actor: await connect(actor) for actor in ACTORS}

    seen = async_to_sync(every_actor)()
    assert tuple(seen.values()) == door.expected, seen


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
@pytest.mark.parametrize("door", rows_of("ws"))
def test_websocket_scope_door(door: Door) -> None:
    """The socket's scope row: a key with only ``jobs:read`` opens it as a key of every scope
    does; a key with every other scope is refused 4403."""
    assert SCOPE_OF[door.what] == JOBS_READ
    world = grant(build_world(), door)
    actor = "staff_perm" if "all=1" in door.what else "owner"
    user = world.users[actor]
    only = api_key_for(user, scopes=[JOBS_READ])  # type: ignore[arg-type]
    all_but = api_key_for(user, scopes=[s for s in ALL_SCOPES if s != JOBS_READ])  # type: ignore[arg-type]
    expected = door.expected[ACTORS.index(actor)]

    async def connect(key: str) -> object:
        comm = WebsocketCommunicator(
            application, world.path(door.what), subprotocols=["token", key]
        )
        # Ten seconds, not Channels' one, on a loaded machine (tests/jobs/test_events.py).
        connected, code = await comm.connect(timeout=10)
        if not connected:
            return code
        await comm.disconnect()
        return "open"

    seen = {"only": async_to_sync(connect)(only), "all but": async_to_sync(connect)(all_but)}
    opened = "open" if str(expected).startswith("open") else expected
    assert seen == {"only": opened, "all but": 4403}, seen
