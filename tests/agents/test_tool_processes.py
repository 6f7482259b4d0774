"""Each tool call runs in a child process of its own (agents/tool_processes.py): stopped at its
timeout, so that "timed out" means it no longer runs and its side effect never comes later; no
thread or process left behind; the database reached on a connection of its own, the worker's
sessions untouched; results and errors reach the model as before."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from django.db import connection, connections

from agents.models import AgentStep, DemoEmail
from agents.sweep import agent_runs_resume
from agents.tools import ToolOutcome, tool_call
from tests.agents.conftest import TEST_TOOL_MODULES, call, detail, run_body, start_run, wait_for
from tests.agents.tools import calls
from tests.db_sessions import session_id
from tests.jobs.test_takeover import processes, worker_env  # noqa: F401 (fixture)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # state, ppid, ...


def _children() -> set[int]:
    """This process's child processes, zombies included."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and int(stat[1]) == os.getpid():
                found.add(int(entry.name))
    return found


def _running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def _connection_id() -> int:
    with connection.cursor() as cursor:
        return session_id(cursor)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_tool_past_its_timeout_is_stopped_and_its_side_effect_never_happens(
    alice_client, agent_workers, fake_provider
):
    body = run_body(
        [call("add", a=1, b=2), call("refuse"), call("late_effect", seconds=2.5)],
        "Done.",
        tools=["add", "refuse", "late_effect"],
    )
    run = start_run(alice_client, body)
    agent_workers.drain()

    result = detail(alice_client, run)
    assert result["status"] == "completed", result
    late = AgentStep.objects.get(run=run, kind="tool", name="late_effect")
    assert late.status == "completed" and late.attempts == 1 and late.is_error
    assert late.output == "Timed out after 1 s: the call was stopped and is no longer running"
    # The model heard every result, in its order: the value, the refusal, the stop.
    last_turn = AgentStep.objects.filter(run=run, kind="model").order_by("-index")[0].job
    results = last_turn.request_messages[-1]["content"]  # type: ignore[union-attr]
    assert [b.get("is_error", False) for b in results] == [False, True, True]
    assert [b["content"] for b in results][:2] == ['{"sum": 3}', "not today"]

    # Past the moment the tool would have done its side effect, it still has not: it was
    # stopped, not left running (a thread went on and did it, after the run had moved on).
    started = calls().index(f"late_effect:start:{late.call_id}")
    time.sleep(3.5)
    assert f"late_effect:{late.call_id}" not in calls()
    assert calls().count(f"late_effect:start:{late.call_id}") == 1 and started >= 0
    # Recorded as completed: nothing runs it again.
    assert agent_runs_resume().calls_taken_back == 0
    late.refresh_from_db()
    assert late.status == "completed" and late.attempts == 1


@pytest.mark.redis
def test_a_hanging_tool_is_stopped_at_its_timeout_and_leaves_no_thread_or_process_behind():
    threads, children = _threads(), _children()

    for n in range(3):
        started = time.monotonic()
        outcome = tool_call(name="hang", tool_input={}, call_id=f"toolu_hang_{n}")
        assert 1 <= time.monotonic() - started < 3
        assert outcome.is_error and outcome.stopped
        assert outcome.output.startswith("Timed out after 1 s: the call was stopped")

    # None more (a thread or process of an earlier test may have ended meanwhile).
    assert _threads() <= threads
    assert _children() <= children  # each child killed and reaped: no zombie either
    started_pids = [c.split(":")[1:3] for c in calls() if c.startswith("hang:")]
    assert len(started_pids) == 3
    for child, sleeper in started_pids:
        # The call's own process, and the process it started (same process group): gone.
        wait_for(
            lambda c=int(child), s=int(sleeper): not _running(c) and not _running(s), seconds=5
        )


@pytest.mark.django_db(transaction=True)
def test_a_tool_reaches_the_database_on_a_connection_of_its_own_and_the_workers_stay_open():
    mine = _connection_id()
    theirs: dict[str, int] = {}
    idle, go_on = threading.Event(), threading.Event()

    def another_job_thread() -> None:  # holds its connection idle, as a worker's threads do
        theirs["before"] = _connection_id()
        idle.set()
        go_on.wait(30)
        theirs["after"] = _connection_id()
        connections.close_all()

    thread = threading.Thread(target=another_job_thread)
    thread.start()
    idle.wait(30)
    try:
        outcome = tool_call(name="database_probe", tool_input={}, call_id="toolu_db")
    finally:
        go_on.set()
        thread.join(30)

    assert not outcome.is_error, outcome
    answer = json.loads(outcome.output)
    assert answer["emails"] == 1 and answer["connection_id"] not in (mine, theirs["before"])
    # The tool collected the garbage its fork made of the other thread's connection; neither
    # session was closed under the worker.
    assert _connection_id() == mine
    assert theirs["after"] == theirs["before"]
    assert DemoEmail.objects.get().call_id == "toolu_db"  # committed by the child, seen here


@pytest.mark.redis
def test_results_and_errors_come_back_from_the_child_as_before():
    assert tool_call(name="add", tool_input={"a": 1, "b": 2}, call_id="c") == ToolOutcome(
        '{"sum": 3}', False
    )
    assert tool_call(name="refuse", tool_input={}, call_id="c") == ToolOutcome("not today", True)
    assert tool_call(name="explode", tool_input={}, call_id="c") == ToolOutcome(
        "RuntimeError: the tool broke", True
    )
    not_json = tool_call(name="not_json", tool_input={}, call_id="c")
    assert not_json.is_error and not_json.output.startswith("The tool's result is not JSON: keys")
    assert tool_call(name="die", tool_input={"how": "exit"}, call_id="c") == ToolOutcome(
        "The tool's process ended without a result (exit code 3)", True
    )
    assert tool_call(name="die", tool_input={"how": "kill"}, call_id="c") == ToolOutcome(
        "The tool's process ended without a result (killed by SIGKILL)", True
    )
    assert calls() == ["add:c", "explode:c"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_call_whose_worker_is_killed_dies_with_it(
    alice_client,
    agent_workers,
    fake_provider,
    processes,  # noqa: F811
):
    run = start_run(alice_client, run_body([call("slow_effect", seconds=3)], "done"))
    agent_workers.llm.work_once()  # turn 1: its tool task on the agents queue
    env = worker_env(
        fake_provider,
        LLM_AGENT_TOOL_MODULES=TEST_TOOL_MODULES,
        LLM_HEARTBEAT_SECONDS="1",
        LLM_RATE_LIMIT_ENABLED="False",
    )
    worker = processes.start(env, "rqworker", "agents")
    wait_for(lambda: any(c.startswith("slow_effect:start") for c in calls()), seconds=60)
    os.kill(worker.pid, signal.SIGKILL)  # the worker alone, not its process group
    worker.wait(timeout=10)

    time.sleep(4)  # past the end of the call, had it run on
    step = AgentStep.objects.get(run=run, kind="tool")
    assert f"slow_effect:{step.call_id}" not in calls(), processes.logs()
    assert step.status == "running"  # the sweep runs it again, once its lease lapses
