"""Pipeline events on the owner's /ws/jobs/ socket (real ASGI stack, channels-redis, workers)."""

from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from tests.jobs.test_events import _key, communicator
from tests.pipelines.helpers import create_pipeline, step

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_the_owner_hears_each_step_complete_and_the_pipeline_finish(
    alice, bob, alice_client, workers, fake_provider
):
    async def scenario() -> tuple[list[dict[str, Any]], bool]:
        alices = communicator(key=await sync_to_async(_key)(alice))
        bobs = communicator(key=await sync_to_async(_key)(bob))
        assert (await alices.connect())[0] and (await bobs.connect())[0]
        pipeline = await sync_to_async(create_pipeline)(
            alice_client, [step("Draft"), step("Shorten: {{previous}}")]
        )
        await sync_to_async(workers.drain)()
        events = []
        while not events or events[-1]["type"] != "pipeline.finished":
            event = await alices.receive_json_from(timeout=5)
            if event["type"].startswith("pipeline."):
                events.append(event)
        bob_heard_nothing = await bobs.receive_nothing(timeout=0.3)
        await alices.disconnect()
        await bobs.disconnect()
        assert {e["pipeline"]["id"] for e in events} == {str(pipeline.id)}
        return events, bob_heard_nothing

    events, bob_heard_nothing = async_to_sync(scenario)()
    assert [e["type"] for e in events] == [
        "pipeline.step_completed",
        "pipeline.step_completed",
        "pipeline.finished",
    ]
    assert [e["pipeline"]["step"]["index"] for e in events[:2]] == [0, 1]
    assert events[-1]["pipeline"]["status"] == "completed"
    assert events[-1]["pipeline"]["finished_at"] and events[-1]["pipeline"]["step_count"] == 2
    assert bob_heard_nothing
