"""Fixtures of the agent tests: the test tools registered, workers for both queues an agent
run uses (the llm queue for its turns, the agents queue for its tool calls)."""

import json
import time
from typing import Any

import pytest
from rest_framework.test import APIClient

import tests.agents.tools  # noqa: F401 (registers the test tools in this process)
from agents.models import AgentRun
from tests.conftest import FakeProvider, Workers

TEST_TOOL_MODULES = "agents.demo_tools,tests.agents.tools"


class AgentWorkers:
    """Real RQ workers (in burst mode, in this process) on both queues, until nothing is left."""

    def __init__(self) -> None:
        self.llm = Workers("llm")
        self.agents = Workers("agents")

    def drain(self, *, rounds: int = 200) -> None:
        for _ in range(rounds):
            self.llm.work_once()
            self.llm.release_scheduled()
            self.agents.work_once()
            if (
                not self.llm.queue.count
                and not self.agents.queue.count
                and not self.llm.queue.scheduled_job_registry.count
            ):
                return
        raise AssertionError("agent work still pending after draining")


@pytest.fixture
def agent_workers(fake_provider: FakeProvider) -> AgentWorkers:
    return AgentWorkers()


def script(*turns: Any) -> str:
    """A first message that scripts the fake provider's tool calls, turn by turn."""
    return "Please help. fake_tool_script=" + json.dumps(list(turns))


def call(name: str, **tool_input: Any) -> dict[str, Any]:
    return {"name": name, "input": tool_input}


def run_body(*turns: Any, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "feature": "agent-test",
        "model": "claude-sonnet-4-6",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": script(*turns)}],
        "tools": ["add", "echo", "explode", "refuse", "sleepy", "guarded", "slow_effect"],
    }
    body.update(overrides)
    return body


def start_run(client: APIClient, body: dict[str, Any], **headers: Any) -> AgentRun:
    response = client.post("/api/v1/agent-runs/", body, format="json", **headers)
    assert response.status_code == 202, response.content
    return AgentRun.objects.get(id=response.json()["id"])


def detail(client: APIClient, run: AgentRun) -> dict[str, Any]:
    response = client.get(f"/api/v1/agent-runs/{run.id}/")
    assert response.status_code == 200, response.content
    return response.json()


def wait_for(condition: Any, *, seconds: float = 30, every: float = 0.1) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("condition not met in time")
