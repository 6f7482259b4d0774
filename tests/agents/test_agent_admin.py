"""The agent runs in the admin: the list, the timeline of a run (each turn's tokens and cost,
each tool call's input, output and duration), and the approve action letting the run go on."""

import pytest
from django.contrib.auth.models import User

from agents.models import AgentRun
from tests.agents.conftest import call, detail, run_body, start_run
from tests.agents.tools import calls

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_staff_see_the_timeline_and_approve_a_waiting_call_in_the_admin(
    alice_client, agent_workers, fake_provider, client
):
    run = start_run(
        alice_client, run_body([call("add", a=4, b=5), call("guarded", note="n")], "ok")
    )
    agent_workers.drain()
    assert AgentRun.objects.get(id=run.id).status == "waiting_approval"
    staff = User.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(staff)

    listing = client.get("/admin/agents/agentrun/").content.decode()
    assert str(run.id) in listing and "Waiting for approval" in listing
    page = client.get(f"/admin/agents/agentrun/{run.id}/change/").content.decode()
    # Each call's input; none of the turn's calls ran while one waits for approval.
    assert "guarded" in page and "{&quot;a&quot;: 4, &quot;b&quot;: 5}" in page
    assert "cache read / out, cost" in page and "$0.0" in page

    response = client.post(
        "/admin/agents/agentrun/",
        {"action": "approve_calls", "_selected_action": [str(run.id)]},
        follow=True,
    )
    assert "1 tool call(s) approved." in response.content.decode()
    agent_workers.drain()
    result = detail(alice_client, run)
    assert result["status"] == "completed"
    page = client.get(f"/admin/agents/agentrun/{run.id}/change/").content.decode()
    assert "sum" in page and " s</p>" in page  # the add call's output and its duration
    assert sorted(c.split(":")[0] for c in calls()) == ["add", "guarded"]
