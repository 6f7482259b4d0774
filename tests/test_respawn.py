"""runtime.respawn: a command that exits is started again; SIGTERM stops it and the wrapper."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

# A child that notes each start and each signal it receives in a file, then does what it is told.
CHILD = """
import os, signal, sys, time
log = sys.argv[1]
def note(line):
    with open(log, "a") as f:
        f.write(line + "\\n")
def on_term(signum, frame):
    note(f"signal {signum} {os.getpid()}")
    time.sleep(0.3)  # a graceful stop takes a moment: a second signal would land here
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
note(f"start {os.getpid()}")
if sys.argv[2] == "crash":
    sys.exit(3)
while True:
    time.sleep(0.1)
"""


def wait_for(check: Callable[[], Any], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def lines(log: Path, prefix: str) -> list[str]:
    if not log.exists():
        return []
    return [line for line in log.read_text().splitlines() if line.startswith(prefix)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead all the same.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


@pytest.fixture
def wrap(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(mode: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-m", "runtime.respawn", "--name", "child", "--"]
            + [sys.executable, "-c", CHILD, str(tmp_path / "child.log"), mode],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            # Its own group, as honcho starts each process.
            start_new_session=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_command_that_exits_is_started_again_with_a_growing_back_off(wrap, tmp_path):
    log = tmp_path / "child.log"
    wrapper = wrap("crash")
    wait_for(lambda: len(lines(log, "start")) >= 3, timeout=10, what="three starts")
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=10) == 0
    stderr = wrapper.stderr.read().decode()
    assert "respawn[child]: exited with code 3 after" in stderr
    assert "starting it again in 1s" in stderr and "starting it again in 2s" in stderr
    assert "respawn[child]: SIGTERM received: stopping, no restart" in stderr


def test_a_killed_command_is_started_again(wrap, tmp_path):
    log = tmp_path / "child.log"
    wrapper = wrap("run")
    first = int(wait_for(lambda: lines(log, "start"), timeout=10, what="a start")[0].split()[1])
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: lines(log, "start")[1:], timeout=10, what="a restart")
    assert int(second[0].split()[1]) != first
    assert wrapper.poll() is None
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=10) == 0
    assert "exited with signal SIGKILL" in wrapper.stderr.read().decode()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_group_reaches_the_command_once_and_stops_both(wrap, tmp_path, signum):
    log = tmp_path / "child.log"
    wrapper = wrap("run")
    child = int(wait_for(lambda: lines(log, "start"), timeout=10, what="a start")[0].split()[1])
    # As honcho stops a process: the signal goes to the wrapper's whole process group.
    os.killpg(wrapper.pid, signum)
    assert wrapper.wait(timeout=10) == 0
    assert not alive(child)
    assert lines(log, "signal") == [f"signal {int(signum)} {child}"]  # once, not twice
    time.sleep(1.5)  # past the first back-off: nothing starts again
    assert len(lines(log, "start")) == 1


def test_the_command_dies_with_a_wrapper_killed_outright(wrap, tmp_path):
    log = tmp_path / "child.log"
    wrapper = wrap("run")
    child = int(wait_for(lambda: lines(log, "start"), timeout=10, what="a start")[0].split()[1])
    wrapper.kill()  # honcho's SIGKILL once its grace period is over
    wrapper.wait(timeout=10)
    wait_for(lambda: not alive(child), timeout=5, what="the command to die with the wrapper")


def test_no_command_is_a_usage_error():
    result = subprocess.run(
        [sys.executable, "-m", "runtime.respawn", "--"], cwd=ROOT, capture_output=True, timeout=30
    )
    assert result.returncode == 2 and b"no command given" in result.stderr
