"""The Procfile's worker_agents (`rqworker agents`): the tool tasks of many runs at once, on
threads of one process, never behind a bulk action on the default queue; a deploy's SIGTERM
lets a tool in flight finish and record before the process exits."""

import os
import signal

import pytest

from agents.models import AgentStep
from tests.agents.conftest import TEST_TOOL_MODULES, call, detail, run_body, start_run, wait_for
from tests.agents.tools import calls
from tests.jobs.test_takeover import processes, worker_env  # noqa: F401 (fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def _agents_worker(processes, fake_provider, **extra: str):  # noqa: F811
    env = worker_env(
        fake_provider,
        LLM_AGENT_TOOL_MODULES=TEST_TOOL_MODULES,
        LLM_HEARTBEAT_SECONDS="1",
        LLM_RATE_LIMIT_ENABLED="False",
        **extra,
    )
    return processes.start(env, "rqworker", "agents")


def test_one_agents_worker_runs_the_tool_calls_of_several_runs_at_once(
    alice_client,
    agent_workers,
    fake_provider,
    processes,  # noqa: F811
):
    runs = [
        start_run(alice_client, run_body([call("slow_effect", seconds=2)], "done"))
        for _ in range(4)
    ]
    for _ in runs:
        agent_workers.llm.work_once()  # each run's turn 1: one tool task on the agents queue
    assert agent_workers.agents.queue.count == 4
    _agents_worker(processes, fake_provider, LLM_AGENT_WORKER_CONCURRENCY="4")

    # Every call started before any ended: four tasks at once in one process (a forking worker
    # runs them one after another, 2 s each).
    wait_for(lambda: len(calls()) >= 5, seconds=60)
    assert [c.split(":")[0] + (":start" in c) * ":start" for c in calls()[:4]] == [
        "slow_effect:start"
    ] * 4, (calls(), processes.logs())
    wait_for(
        lambda: AgentStep.objects.filter(kind="tool", status="completed").count() == 4, seconds=30
    )
    # Each task submits its run's next turn after recording its call: drain once all four did.
    wait_for(lambda: AgentStep.objects.filter(kind="model", turn=2).count() == 4, seconds=30)
    agent_workers.drain()
    for run in runs:
        assert detail(alice_client, run)["status"] == "completed"
    assert "running up to 4 jobs at once on threads" in processes.output()


def test_a_sigterm_lets_the_tool_in_flight_finish_and_record_before_the_worker_exits(
    alice_client,
    agent_workers,
    fake_provider,
    processes,  # noqa: F811
):
    run = start_run(alice_client, run_body([call("slow_effect", seconds=3)], "done"))
    agent_workers.llm.work_once()
    worker = _agents_worker(processes, fake_provider)
    wait_for(lambda: any(c.startswith("slow_effect:start") for c in calls()), seconds=60)
    os.kill(worker.pid, signal.SIGTERM)  # a deploy, mid-call

    assert worker.wait(timeout=30) == 0, processes.logs()
    step = AgentStep.objects.get(run=run, kind="tool")
    assert step.status == "completed" and step.attempts == 1 and step.output == "done"
    assert [c.split(":")[0] for c in calls()] == ["slow_effect", "slow_effect"]  # start, end
    agent_workers.drain()  # turn 2, submitted by the task before the worker left
    assert detail(alice_client, run)["status"] == "completed"
