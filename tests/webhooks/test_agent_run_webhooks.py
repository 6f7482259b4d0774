"""An agent run's webhook: ``callback_url`` on POST /api/v1/agent-runs/, one signed POST when the
run ends, with the run (every step) as the API shows it; none for its turns' jobs."""

from typing import Any

import pytest

from tests.agents.conftest import AgentWorkers, call, run_body, start_run
from tests.conftest import Workers
from tests.webhooks.helpers import receiver
from webhooks.models import WebhookDelivery

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_a_finished_run_is_posted_once_as_the_api_shows_it(
    alice_client, fake_provider, settings: Any
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    with receiver() as hook:
        body = run_body([call("echo", text="hi")], "Done.", callback_url=f"{hook.url}/runs")
        run = start_run(alice_client, body)
        AgentWorkers().drain()
        Workers("alerts").drain()
        hook.wait_for(1)
    shown = alice_client.get(f"/api/v1/agent-runs/{run.id}/").json()
    assert shown["status"] == "completed" and len(shown["steps"]) == 3
    assert hook.bodies == [{"type": "agent_run.completed", "agent_run": shown}]
    assert hook.requests[0]["headers"]["LLM-Webhook-Event"] == "agent_run.completed"
    (delivery,) = WebhookDelivery.objects.all()
    assert (delivery.subject_kind, delivery.subject_id) == ("agent_run", str(run.id))


def test_a_cancelled_run_is_posted_cancelled(alice_client, fake_provider, settings: Any):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    with receiver() as hook:
        run = start_run(alice_client, run_body("Done.", callback_url=hook.url))
        assert alice_client.post(f"/api/v1/agent-runs/{run.id}/cancel/").status_code == 200
        AgentWorkers().drain()
        Workers("alerts").drain()
        hook.wait_for(1)
    assert [b["type"] for b in hook.bodies] == ["agent_run.cancelled"]
    assert hook.bodies[0]["agent_run"]["status"] == "cancelled"


def test_a_bad_callback_url_refuses_the_run(alice_client, settings: Any):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = False
    response = alice_client.post(
        "/api/v1/agent-runs/",
        run_body("Done.", callback_url="http://127.0.0.1/hook?token=s3cret"),
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_callback_url"
    assert "s3cret" not in response.content.decode()
