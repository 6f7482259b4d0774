"""Copies of one run's tool task at once, and a task that died between its last record and the
next turn: every call runs once, the next turn is submitted once."""

import threading

import pytest
from django.db import connections

from agents.models import AgentStep
from agents.runner import _run_one, agent_tools_run
from agents.sweep import agent_runs_resume
from jobs.models import LlmJob
from tests.agents.conftest import call, detail, run_body, start_run
from tests.agents.tools import calls

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_two_copies_of_a_tool_task_at_once_run_each_call_once_and_submit_one_next_turn(
    alice_client, agent_workers, fake_provider
):
    body = run_body([call("add", a=1, b=1), call("echo", text="x"), call("add", a=2, b=2)], "ok")
    run = start_run(alice_client, body)
    agent_workers.llm.work_once()  # turn 1 asks for three calls
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def copy() -> None:
        try:
            barrier.wait()
            agent_tools_run(run_id=run.id)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=copy) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors

    tools = AgentStep.objects.filter(run=run, kind="tool")
    assert sorted(c.split(":")[0] for c in calls()) == ["add", "add", "echo"]
    assert {(s.status, s.attempts) for s in tools} == {("completed", 1)}
    assert AgentStep.objects.filter(run=run, kind="model").count() == 2
    assert LlmJob.objects.count() == 2
    agent_workers.drain()
    assert detail(alice_client, run)["status"] == "completed"


def test_a_run_whose_task_died_after_its_last_record_is_advanced_by_the_sweep(
    alice_client, agent_workers, fake_provider, settings
):
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0.0
    run = start_run(alice_client, run_body([call("echo", text="x")], "ok"))
    agent_workers.llm.work_once()
    agent_workers.agents.queue.empty()  # its task is lost ...
    (step,) = AgentStep.objects.filter(run=run, kind="tool")
    assert _run_one(step.id)[0]  # ... after the call was recorded, before the next turn
    assert LlmJob.objects.count() == 1

    report = agent_runs_resume()
    assert report.runs_advanced == 1 and report.tasks_enqueued == 0
    assert agent_runs_resume().runs_advanced == 0  # once
    agent_workers.drain()
    result = detail(alice_client, run)
    assert result["status"] == "completed" and result["turns"] == 2
    assert calls() == [f"echo:{step.call_id}"]
