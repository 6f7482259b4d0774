"""Each tool call runs in a child process of its own (agents/tool_processes.py): stopped at its
timeout, so that "timed out" means it no longer runs and its side effect never comes later; no
thread or process left behind; the database reached on a connection of its own, the worker's
sessions untouched; results and errors reach the model as before."""

import errno
import fcntl
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection, connections

import agents.tools
from agents.fork_server import ForkServer, fork_server, fork_server_stop
from agents.models import AgentStep, DemoEmail
from agents.sweep import agent_runs_resume
from agents.tools import ToolOutcome, agent_tool, tool_call, tool_fork_server_start
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


@pytest.fixture(params=["forked by this process", "forked by its fork server"])
def forking(request: pytest.FixtureRequest) -> Iterator[ForkServer | None]:
    """Each call forked by this process itself, or by the fork server the agents worker starts
    (agents/fork_server.py): the same guarantees either way."""
    if request.param == "forked by this process":
        yield None
        return
    server = tool_fork_server_start()
    assert fork_server() is server and _running(server._pid)
    try:
        yield server
    finally:
        pid = server._pid
        fork_server_stop()
        assert not _running(pid)


def _server_children(server: ForkServer | int | None) -> set[int]:
    if server is None:
        return set()
    pid = server if isinstance(server, int) else server._pid
    return {
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit()
        and (stat := _stat(int(entry.name))) is not None
        and int(stat[1]) == pid
    }


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
def test_a_hanging_tool_is_stopped_at_its_timeout_and_leaves_no_thread_or_process_behind(
    forking: ForkServer | None,
):
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
    assert _server_children(forking) == set()  # the fork server's too
    started_pids = [c.split(":")[1:3] for c in calls() if c.startswith("hang:")]
    assert len(started_pids) == 3
    for child, sleeper in started_pids:
        # The call's own process, and the process it started (same process group): gone.
        wait_for(
            lambda c=int(child), s=int(sleeper): not _running(c) and not _running(s), seconds=5
        )


@pytest.mark.django_db(transaction=True)
def test_a_tool_reaches_the_database_on_a_connection_of_its_own_and_the_workers_stay_open(
    forking: ForkServer | None,
):
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
def test_results_and_errors_come_back_from_the_child_as_before(forking: ForkServer | None):
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
    assert _server_children(forking) == set()
    # Whose child ran it: this process's, or the fork server's.
    ran = json.loads(tool_call(name="parentage", tool_input={}, call_id="c").output)
    assert ran["ppid"] == (forking._pid if forking else os.getpid())


def _slow_call_in_flight(call_id: str) -> tuple[threading.Thread, list[ToolOutcome]]:
    """A 3 s ``slow_effect`` call on a thread, once its process has started; its outcome is
    appended to the list when it ends."""
    outcome: list[ToolOutcome] = []
    thread = threading.Thread(
        target=lambda: outcome.append(
            tool_call(name="slow_effect", tool_input={"seconds": 3}, call_id=call_id)
        )
    )
    thread.start()
    wait_for(lambda: f"slow_effect:start:{call_id}" in calls(), seconds=30)
    return thread, outcome


@pytest.mark.redis
def test_a_fork_server_killed_mid_call_ends_the_call_and_another_one_starts():
    server = tool_fork_server_start()
    try:
        first = server._pid
        thread, outcome = _slow_call_in_flight("toolu_srv")
        os.kill(first, signal.SIGKILL)
        thread.join(30)
        # The call died with its server (its parent-death signal), without a result.
        assert outcome == [
            ToolOutcome("The tool's process ended without a result (its fork server ended)", True)
        ]
        time.sleep(3.5)
        assert "slow_effect:toolu_srv" not in calls()
        # Another server took its place; calls meanwhile forked here; none is left behind.
        wait_for(lambda: fork_server() is not None and server._pid not in (0, first), seconds=10)
        ran = json.loads(tool_call(name="parentage", tool_input={}, call_id="c").output)
        assert ran["ppid"] == server._pid != first
        assert not _running(first)
    finally:
        fork_server_stop()


@pytest.mark.redis
def test_a_fork_the_server_cannot_make_fails_that_call_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    # fork() fails in the server once the flag exists (EAGAIN: a pid or memory limit reached),
    # as it can for one call among many; the calls already running must not pay for it.
    flag, real_fork, worker = tmp_path / "fail-next-fork", os.fork, os.getpid()

    def fork_failing_in_the_server() -> int:
        if os.getpid() != worker and flag.exists():
            flag.unlink()
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return real_fork()

    monkeypatch.setattr(os, "fork", fork_failing_in_the_server)
    server = tool_fork_server_start()
    try:
        first = server._pid
        thread, outcome = _slow_call_in_flight("toolu_run")
        flag.touch()
        ran = json.loads(tool_call(name="parentage", tool_input={}, call_id="c").output)
        assert not flag.exists()  # the server's fork failed ...
        assert ran["ppid"] == worker  # ... and the worker forked this call itself
        thread.join(30)
        assert outcome == [ToolOutcome("done", False)]  # the call in flight went on
        assert "slow_effect:toolu_run" in calls()
        assert server._pid == first and _running(first)  # the same server serves on
        ran = json.loads(tool_call(name="parentage", tool_input={}, call_id="c").output)
        assert ran["ppid"] == first
    finally:
        fork_server_stop()


@pytest.mark.redis
def test_a_tool_registered_after_the_fork_server_started_is_forked_by_the_worker(
    monkeypatch: pytest.MonkeyPatch,
):
    server = tool_fork_server_start()
    monkeypatch.setattr(agents.tools, "_registry", dict(agents.tools._registry))
    try:

        @agent_tool(description="Registered late.", input_schema={"type": "object"})
        def registered_late() -> dict[str, int]:
            return {"ppid": os.getppid()}

        ran = json.loads(tool_call(name="registered_late", tool_input={}, call_id="c").output)
        assert ran["ppid"] == os.getpid()  # the server has no such tool: forked here
        ran = json.loads(tool_call(name="parentage", tool_input={}, call_id="c").output)
        assert ran["ppid"] == server._pid
    finally:
        fork_server_stop()


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
    # The worker's fork server (agents/fork_server.py), and the call's process its child.
    servers = [
        int(e.name)
        for e in Path("/proc").iterdir()
        if e.name.isdigit() and (stat := _stat(int(e.name))) and int(stat[1]) == worker.pid
    ]
    assert len(servers) == 1, servers
    call_processes = _server_children(servers[0])
    assert len(call_processes) == 1, call_processes
    # Named for ps and top (their command line is the worker's).
    assert Path(f"/proc/{servers[0]}/comm").read_text() == "llmops-forksrv\n"
    assert Path(f"/proc/{min(call_processes)}/comm").read_text() == "llmops-toolcall\n"
    os.kill(worker.pid, signal.SIGKILL)  # the worker alone, not its process group
    worker.wait(timeout=10)
    wait_for(lambda: not any(_running(p) for p in [*servers, *call_processes]), seconds=5)

    time.sleep(4)  # past the end of the call, had it run on
    step = AgentStep.objects.get(run=run, kind="tool")
    assert f"slow_effect:{step.call_id}" not in calls(), processes.logs()
    assert step.status == "running"  # the sweep runs it again, once its lease lapses


@pytest.mark.redis
def test_the_fork_server_holds_nothing_the_worker_opened(tmp_path: Path):
    """It lives as long as the worker: a descriptor it inherited and kept would keep a lock the
    worker took (this suite's own machine-share locks hung so) or a socket the worker closed."""
    held = (tmp_path / "lock").open("a")
    fcntl.flock(held, fcntl.LOCK_SH)
    server = tool_fork_server_start()
    try:
        held.close()  # the worker lets go
        with (tmp_path / "lock").open("a") as other:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it any more
        # Its calls still log, and answer.
        assert tool_call(name="add", tool_input={"a": 2, "b": 2}, call_id="c") == ToolOutcome(
            '{"sum": 4}', False
        )
        assert fork_server() is server
    finally:
        fork_server_stop()
