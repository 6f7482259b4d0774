"""Helpers of the pipeline tests: submit a pipeline, run exactly one RQ job."""

from typing import Any

import django_rq
from rest_framework.test import APIClient
from rq import SimpleWorker

from pipelines.models import Pipeline
from tests.conftest import job_body


def step(text: str, **overrides: Any) -> dict[str, Any]:
    """A step's job body whose one user message is ``text``."""
    return job_body(messages=[{"role": "user", "content": text}], **overrides)


def three_steps() -> list[dict[str, Any]]:
    return [
        step("Draft a reply to: please refund my order"),
        step("Shorten: {{previous}}", feature="summarize"),
        step("Translate: {{previous}}", max_tokens=128),
    ]


def create_pipeline(client: APIClient, steps: list[dict[str, Any]], **fields: Any) -> Pipeline:
    response = client.post("/api/v1/pipelines/", {"steps": steps, **fields}, format="json")
    assert response.status_code == 202, response.content
    return Pipeline.objects.get(id=response.json()["id"])


def work_one() -> None:
    """Run exactly one job of the llm queue, as a real worker does (the next step's job it
    enqueues is left on the queue)."""
    queue = django_rq.get_queue("llm")
    SimpleWorker([queue], connection=queue.connection).work(burst=True, max_jobs=1)


def detail(client: APIClient, pipeline: Pipeline) -> dict[str, Any]:
    response = client.get(f"/api/v1/pipelines/{pipeline.id}/")
    assert response.status_code == 200, response.content
    return response.json()


def statuses(body: dict[str, Any]) -> list[str]:
    return [s["status"] for s in body["steps"]]
