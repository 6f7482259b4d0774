"""Ctrl-C on ``make run`` (issue 43, 10): honcho stops every process and ``make`` ends quietly
with 0, not ``make: *** [Makefile: run] Error 130``. Driven as a person does it: ``make`` at a
terminal (a pseudo-terminal here) and Ctrl-C typed into it; the recipe's command stands in for
honcho (it stops on SIGINT with honcho's exit code, 130)."""

import os
import pty
import re
import select
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STAND_IN = """\
import sys, time
try:
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("stopped cleanly", flush=True)
    sys.exit(130)
"""


def _make_at_a_terminal(makefile_dir: Path, target: str) -> tuple[str, int]:
    """``make <target>`` under a pseudo-terminal; Ctrl-C once its command printed ``ready``."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: make, as a shell at a terminal would start it
        os.chdir(makefile_dir)
        os.execvp("make", ["make", "-s", target])
    out, sent, deadline = b"", False, time.monotonic() + 30
    while time.monotonic() < deadline:
        if not sent and b"ready" in out:
            os.write(fd, b"\x03")  # Ctrl-C, as typed
            sent = True
        if select.select([fd], [], [], 0.1)[0]:
            try:
                data = os.read(fd, 4096)
            except OSError:  # the terminal closed: every process on it has ended
                break
            if not data:
                break
            out += data
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return out.decode(errors="replace"), os.waitstatus_to_exitcode(status)


def _makefile(tmp_path: Path, recipe: str) -> Path:
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    (tmp_path / "Makefile").write_text(f"run:\n\t{recipe}\n")
    return tmp_path


def test_ctrl_c_stops_the_command_and_make_ends_with_0(tmp_path: Path) -> None:
    command = f"cd {ROOT} && exec {sys.executable} -m runtime.foreground -- {sys.executable}"
    out, code = _make_at_a_terminal(_makefile(tmp_path, f"{command} {tmp_path}/stand_in.py"), "run")
    assert "stopped cleanly" in out, out
    assert "Error" not in out and "Interrupt" not in out, out
    assert code == 0, out


def test_without_the_wrapper_make_reports_the_stop_as_an_error(tmp_path: Path) -> None:
    """The control: the same command run directly by the recipe."""
    out, code = _make_at_a_terminal(
        _makefile(tmp_path, f"exec {sys.executable} {tmp_path}/stand_in.py"), "run"
    )
    assert "stopped cleanly" in out and re.search(r"Error 130|Interrupt", out), out
    assert code != 0


def test_make_run_starts_honcho_through_the_wrapper() -> None:
    recipe = (ROOT / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert re.search(
        r"exec \$\(BIN\)/python -m runtime\.foreground -- \$\(BIN\)/honcho start", recipe
    )


SLOW_STOP = """\
import pathlib, signal, sys, time
def stop(*_):
    time.sleep(1.0)  # honcho stopping every process takes a while
    pathlib.Path(sys.argv[1]).write_text("stopped")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_sigterm_without_a_terminal_waits_for_the_command_to_stop(tmp_path: Path) -> None:
    """How tests/ops/test_make_run.py (and a supervisor) stop make run: SIGTERM to make's process
    group, wait for make, then SIGKILL what is left. make must not end before honcho has stopped
    its processes, or the SIGKILL catches honcho mid-stop and its children live on."""
    import signal
    import subprocess

    (tmp_path / "slow_stop.py").write_text(SLOW_STOP)
    marker = tmp_path / "stopped"
    command = f"cd {ROOT} && exec {sys.executable} -m runtime.foreground -- {sys.executable}"
    (tmp_path / "Makefile").write_text(f"run:\n\t{command} {tmp_path}/slow_stop.py {marker}\n")
    log = tmp_path / "make.log"
    with log.open("wb") as out:
        make = subprocess.Popen(
            ["make", "-s", "run"], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while b"ready" not in log.read_bytes():
        assert time.monotonic() < deadline and make.poll() is None, log.read_text()
        time.sleep(0.05)
    os.killpg(make.pid, signal.SIGTERM)
    make.wait(timeout=30)
    assert marker.exists(), f"make ended before the command had stopped: {log.read_text()}"
