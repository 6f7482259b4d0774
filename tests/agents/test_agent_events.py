"""Agent run events on the owner's /ws/jobs/ socket and on staff's ?all=1 socket (real ASGI
stack, channels-redis, real workers)."""

from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from tests.agents.conftest import call, run_body, start_run
from tests.conftest import make_user
from tests.jobs.test_events import _key, communicator

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_the_owner_and_staff_watching_all_hear_each_step_and_the_run_finish(
    alice, bob, alice_client, agent_workers, fake_provider
):
    staff = make_user("watcher", "view_llmjob", is_staff=True)

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        alices = communicator(key=await sync_to_async(_key)(alice))
        bobs = communicator(key=await sync_to_async(_key)(bob))
        staffs = communicator("/ws/jobs/?all=1", key=await sync_to_async(_key)(staff))
        for socket in (alices, bobs, staffs):
            assert (await socket.connect())[0]
        run = await sync_to_async(start_run)(
            alice_client, run_body([call("echo", text="hi"), call("add", a=1, b=1)], "done")
        )
        await sync_to_async(agent_workers.drain)()

        async def agent_events(socket: Any) -> list[dict[str, Any]]:
            events: list[dict[str, Any]] = []
            while not (
                events
                and events[-1]["type"] == "agent.updated"
                and events[-1]["run"]["status"] == "completed"
            ):
                event = await socket.receive_json_from(timeout=5)
                if event["type"].startswith("agent."):
                    events.append(event)
            return events

        owner_events = await agent_events(alices)
        staff_events = await agent_events(staffs)
        bob_heard_nothing = await bobs.receive_nothing(timeout=0.3)
        for socket in (alices, bobs, staffs):
            await socket.disconnect()
        assert {e["run"]["id"] for e in owner_events} == {str(run.id)}
        return owner_events, staff_events, bob_heard_nothing

    owner_events, staff_events, bob_heard_nothing = async_to_sync(scenario)()
    steps = [(e["step"]["index"], e["step"]["status"]) for e in owner_events if "step" in e]
    # Each step is heard starting and finishing: turn 1, two tool calls, turn 2.
    assert (0, "running") in steps and (0, "completed") in steps
    assert (1, "running") in steps and (1, "completed") in steps
    assert (2, "completed") in steps and (3, "completed") in steps
    updated = [e["run"] for e in owner_events if e["type"] == "agent.updated"]
    assert updated[0]["status"] == "queued" and updated[-1]["status"] == "completed"
    assert "running" in [u["status"] for u in updated]
    assert updated[-1]["turns"] == 2 and float(updated[-1]["cost_usd"]) > 0
    assert [e["type"] for e in staff_events] == [e["type"] for e in owner_events]
    assert bob_heard_nothing
