"""An agent run's deadline and tags: validated, shown, applied to its turns' jobs, ``?tag=`` in
the run list; no turn is sent once the run's deadline has passed."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import AgentRun
from agents.services import _submit_turn
from jobs.models import LlmJob
from tests.agents.conftest import detail, run_body, start_run

pytestmark = [pytest.mark.django_db]


def test_a_runs_deadline_and_tags_go_to_its_turns_jobs(alice_client):
    run = start_run(alice_client, run_body("hi", deadline_seconds=300, tags=["Support"]))
    assert run.deadline is not None and run.tags == ["support"]
    (job,) = LlmJob.objects.all()
    assert job.deadline == run.deadline and job.tags == ["support"]
    body = detail(alice_client, run)
    assert body["tags"] == ["support"] and body["deadline"] is not None


@pytest.mark.parametrize(
    "change,code",
    [
        ({"deadline": "2020-01-01T00:00:00Z"}, "invalid_deadline"),
        ({"deadline_seconds": 30, "deadline": "2999-01-01T00:00:00Z"}, "invalid_deadline"),
        ({"tags": "support"}, "invalid_tags"),
    ],
)
def test_a_bad_deadline_or_tags_refuses_the_run(alice_client, change, code):
    response = alice_client.post("/api/v1/agent-runs/", run_body("hi", **change), format="json")
    assert response.status_code == 400 and response.json()["code"] == code
    assert not AgentRun.objects.exists() and not LlmJob.objects.exists()


def test_the_run_list_filters_by_tag(alice_client):
    tagged = start_run(alice_client, run_body("hi", tags=["support"]))
    start_run(alice_client, run_body("hi"))
    rows = alice_client.get("/api/v1/agent-runs/", {"tag": "support"}).json()["results"]
    assert [row["id"] for row in rows] == [str(tagged.id)]


def test_no_turn_is_sent_after_the_runs_deadline(alice_client):
    run = start_run(alice_client, run_body("hi", deadline_seconds=300))
    AgentRun.objects.filter(id=run.id).update(deadline=timezone.now() - timedelta(seconds=1))
    run.refresh_from_db()
    _submit_turn(run, steps=[])
    run.refresh_from_db()
    assert run.status == "failed" and run.error_code == "deadline_exceeded"
    assert LlmJob.objects.count() == 1  # only the first turn's
