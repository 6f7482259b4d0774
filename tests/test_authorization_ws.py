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
from llmops.asgi import application
from tests.authorization_world import ACTORS, build_world
from tests.test_authorization import Door, grant, rows_of


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
        connected, code = await comm.connect()
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
