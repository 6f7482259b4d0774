"""The run-like resources list alike (api/runs.py): ``status``, ``feature``, ``tag`` and
``since`` filter jobs, batches and agent runs the same way, pipelines by status and since, and a
bad value answers ``400 invalid_filter`` naming the field. Real MariaDB."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import AgentRun
from batches.models import Batch
from jobs.models import LlmJob
from pipelines.models import Pipeline
from tests.agents.conftest import run_body
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

LISTS = {
    "jobs": ("/api/v1/jobs/", LlmJob),
    "batches": ("/api/v1/batches/", Batch),
    "agent-runs": ("/api/v1/agent-runs/", AgentRun),
    "pipelines": ("/api/v1/pipelines/", Pipeline),
}


def _make(client, kind: str, feature: str, tags: list[str]) -> str:
    if kind == "jobs":
        body = job_body(feature=feature, tags=tags)
    elif kind == "batches":
        item = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
        body = {"feature": feature, "model": "claude-sonnet-4-6", "tags": tags, "items": [item]}
    elif kind == "agent-runs":
        body = run_body("Finished.", feature=feature, tags=tags)
    else:
        body = {"steps": [{"feature": feature, "model": "claude-sonnet-4-6", "max_tokens": 16,
                           "messages": [{"role": "user", "content": "hi"}]}]}  # fmt: skip
    answer = client.post(LISTS[kind][0], body, format="json")
    assert answer.status_code == 202, answer.content
    return answer.json()["id"]


def _ids(client, kind: str, query: str) -> set[str]:
    answer = client.get(f"{LISTS[kind][0]}?{query}")
    assert answer.status_code == 200, answer.content
    return {row["id"] for row in answer.json()["results"]}


@pytest.mark.parametrize("kind", ["jobs", "batches", "agent-runs"])
def test_feature_tag_and_since_filter_every_run_like_list(alice_client, kind: str) -> None:
    old = _make(alice_client, kind, "digest", ["nightly"])
    model = LISTS[kind][1]
    model.objects.filter(id=old).update(created_at=timezone.now() - timedelta(days=2))
    new = _make(alice_client, kind, "classify", ["urgent"])
    assert _ids(alice_client, kind, "feature=digest") == {old}
    assert _ids(alice_client, kind, "tag=urgent") == {new}
    since = (timezone.now() - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert _ids(alice_client, kind, f"since={since}") == {new}
    status = model.objects.get(id=new).status
    assert _ids(alice_client, kind, f"status={status}&feature=classify") == {new}


def test_pipelines_filter_by_status_and_since(alice_client) -> None:
    old = _make(alice_client, "pipelines", "digest", [])
    Pipeline.objects.filter(id=old).update(created_at=timezone.now() - timedelta(days=2))
    new = _make(alice_client, "pipelines", "digest", [])
    since = (timezone.now() - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert _ids(alice_client, "pipelines", f"since={since}") == {new}
    assert _ids(alice_client, "pipelines", "") == {old, new}


BAD_FILTERS = [("status=nope", "status"), ("since=yesterday", "since"), ("tag=a%20b", "tag")]


@pytest.mark.parametrize(
    "kind,query,field",
    [
        (kind, query, field)
        for kind in sorted(LISTS)
        for query, field in BAD_FILTERS
        if not (kind == "pipelines" and field == "tag")  # a pipeline has no tags
    ],
)
def test_a_bad_filter_answers_400_naming_its_field(alice_client, kind, query, field) -> None:
    answer = alice_client.get(f"{LISTS[kind][0]}?{query}")
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "invalid_filter"
    assert answer.json()["detail"]["field"] == field
