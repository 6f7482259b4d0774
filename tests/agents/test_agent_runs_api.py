"""POST/GET /api/v1/agent-runs/: what is refused (400 with a code and the field), the
Idempotency-Key, who sees which runs."""

import pytest

from agents.models import AgentRun
from jobs.models import LlmJob
from tests.agents.conftest import run_body, start_run
from tests.conftest import _client_for, make_user

pytestmark = [pytest.mark.django_db]


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"tools": ["add", "no_such_tool"]}, "unknown_tool", "tools[1]"),
        ({"tools": "add"}, "invalid_tools", "tools"),
        ({"max_turns": 0}, "invalid_max_turns", "max_turns"),
        ({"max_turns": 51}, "invalid_max_turns", "max_turns"),
        ({"max_cost_usd": "-1"}, "invalid_max_cost_usd", "max_cost_usd"),
        ({"max_cost_usd": "lots"}, "invalid_max_cost_usd", "max_cost_usd"),
        ({"metadata": []}, "invalid_metadata", "metadata"),
        ({"metadata": {"llmops_agent_run": 1}}, "invalid_metadata", "metadata.llmops_agent_run"),
        ({"feature": "Not A Slug"}, "invalid_feature", "feature"),
        ({"max_tokens": 0}, "invalid_max_tokens", "max_tokens"),
        ({"messages": []}, "invalid_messages", "messages"),
        ({"model": "no-such-model"}, "unknown_model", "model"),
    ],
)
def test_a_bad_field_answers_400_with_its_code_and_field_and_writes_nothing(
    alice_client, change, code, field
):
    response = alice_client.post("/api/v1/agent-runs/", run_body("hi", **change), format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == code
    assert body["detail"]["field"] == field
    assert AgentRun.objects.count() == 0 and LlmJob.objects.count() == 0


def test_an_unknown_field_is_refused(alice_client):
    response = alice_client.post(
        "/api/v1/agent-runs/", run_body("hi", temperature=0.5), format="json"
    )
    assert response.status_code == 400 and response.json()["code"] == "unknown_field"


def test_a_run_is_accepted_with_202_its_status_url_and_a_first_turn_job(alice_client):
    response = alice_client.post("/api/v1/agent-runs/", run_body("hi"), format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "queued"
    assert body["status_url"] == f"/api/v1/agent-runs/{body['id']}/"
    assert response["Location"].endswith(body["status_url"])
    run = AgentRun.objects.get(id=body["id"])
    assert run.max_turns == 10 and run.turns == 1
    job = LlmJob.objects.get()
    assert job.metadata["llmops_agent_run"] == {"id": str(run.id), "turn": 1}
    assert [t["name"] for t in job.params["tools"]] == run.tools
    detail = alice_client.get(body["status_url"]).json()
    assert detail["steps"][0]["kind"] == "model" and detail["steps"][0]["job"] == str(job.id)


def test_a_repeated_idempotency_key_returns_the_first_run(alice_client):
    first = start_run(alice_client, run_body("hi"), HTTP_IDEMPOTENCY_KEY="run-1")
    again = start_run(alice_client, run_body("hi"), HTTP_IDEMPOTENCY_KEY="run-1")
    assert again.id == first.id and AgentRun.objects.count() == 1
    other = alice_client.post(
        "/api/v1/agent-runs/", run_body("bye"), format="json", HTTP_IDEMPOTENCY_KEY="run-1"
    )
    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict"


def test_the_list_shows_ones_own_runs_and_staff_with_the_view_permission_see_all(
    alice_client, bob_client
):
    mine = start_run(alice_client, run_body("hi"))
    start_run(bob_client, run_body("hi"))
    listed = alice_client.get("/api/v1/agent-runs/").json()["results"]
    assert [r["id"] for r in listed] == [str(mine.id)]
    assert bob_client.get(f"/api/v1/agent-runs/{mine.id}/").status_code == 404
    assert bob_client.post(f"/api/v1/agent-runs/{mine.id}/cancel/").status_code == 404
    staff = _client_for(make_user("staff", "view_agentrun", is_staff=True))
    assert len(staff.get("/api/v1/agent-runs/").json()["results"]) == 2
    bad = alice_client.get("/api/v1/agent-runs/?status=asleep")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_filter"
    assert alice_client.get("/api/v1/agent-runs/not-a-uuid/").status_code == 404
