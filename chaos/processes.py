"""The processes a drill starts, and making sure none of them outlives it.

Each Procfile line is started as honcho starts it (under ``runtime.respawn``, the virtualenv's
``bin`` first on PATH), in a session of its own, its output in a log file. The respawn wrapper
runs its command in yet another process group, and rq forks a scheduler process, so stopping by
group is not enough: ``stop`` sends SIGTERM to each wrapper (a warm shutdown of its command),
waits, and then SIGKILLs every process still alive in each tree, found from /proc.
"""

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from django.conf import settings

__all__ = [
    "Process",
    "Stack",
    "descendants",
    "free_port",
    "is_zombie",
    "procfile_command",
    "wait_until",
]

ROOT = Path(settings.BASE_DIR)
RESPAWN = ["python", "-m", "runtime.respawn", "--"]
STOP_SECONDS = 40.0
"""A warm shutdown waits for the calls in flight (a long call takes 15 s) before SIGKILL."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def procfile_command(name: str) -> list[str]:
    """The Procfile's line ``name`` as an argument list, respawn wrapper included."""
    for line in (ROOT / "Procfile").read_text().splitlines():
        key, _, command = line.partition(":")
        if key.strip() == name:
            return shlex.split(command)
    raise LookupError(f"the Procfile has no {name} line")


def wait_until(check: Callable[[], object], *, timeout: float, every: float = 0.2) -> bool:
    """Poll ``check`` until it returns something true (errors count as false); False on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return True
        except Exception:  # noqa: BLE001 - a process still starting refuses connections
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(every)


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from its 3rd field on (state, ppid, ...); None once the pid is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (2nd field) is in parentheses and may hold spaces: split after it.
    return stat.rsplit(")", 1)[1].split()


def is_zombie(pid: int) -> bool:
    """Dead, not reaped yet (also False once it is gone)."""
    fields = _stat(pid)
    return fields is not None and fields[0] == "Z"


def _parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def _identity(pid: int) -> tuple[int, str] | None:
    """(pid, start time since boot): a pid the kernel hands to a new process later is not
    taken for one of ours."""
    fields = _stat(pid)
    return (pid, fields[19]) if fields and fields[0] != "Z" else None


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first found, then theirs)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _parent_of(int(entry.name))
            if parent is not None:
                parents.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@dataclass
class Process:
    name: str
    popen: "subprocess.Popen[bytes]"
    log: Path
    known: set[tuple[int, str]] = field(default_factory=set)
    """Every process ever seen in its tree, by identity: killed at the end even if it was
    re-parented meanwhile."""

    def remember(self, pids: list[int]) -> None:
        self.known.update(i for i in map(_identity, pids) if i is not None)

    def tree(self) -> list[int]:
        pids = [self.popen.pid, *descendants(self.popen.pid)]
        self.remember(pids)
        return pids

    def command_pid(self) -> int | None:
        """The pid of the command under the respawn wrapper (None between two runs of it)."""
        children = descendants(self.popen.pid)
        direct = [pid for pid in children if _parent_of(pid) == self.popen.pid]
        self.remember(children)
        return direct[0] if direct else None


class Stack:
    """Processes started for one drill; ``stop`` leaves none of them running."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        bin_dir = str(Path(sys.executable).parent)
        self.env = {**env, "PATH": bin_dir + os.pathsep + env.get("PATH", "")}
        self.log_dir = log_dir
        self.processes: list[Process] = []
        self.stopped_on_purpose: set[str] = set()

    def start(self, name: str, args: list[str]) -> Process:
        path = self.log_dir / f"{len(self.processes):02d}-{name}.log"
        log: IO[bytes]
        with path.open("wb") as log:
            popen = subprocess.Popen(
                args,
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        process = Process(name, popen, path)
        process.remember([popen.pid])
        self.processes.append(process)
        return process

    def start_procfile(
        self, name: str, *, label: str | None = None, port: int | None = None
    ) -> Process:
        """``port`` replaces the line's ``--port`` value (the web line's fixed 8000)."""
        args = procfile_command(name)
        if port is not None:
            args[args.index("--port") + 1] = str(port)
        return self.start(label or name, args)

    def stop_process(self, process: Process) -> None:
        """SIGTERM its respawn wrapper: a warm stop of its command, and no restart (a fault of
        the drill: ``died`` leaves it out)."""
        process.tree()
        self.stopped_on_purpose.add(process.name)
        if process.popen.poll() is None:
            _kill([process.popen.pid], signal.SIGTERM)

    def watch(self) -> None:
        """Note every process now in each tree (called every few seconds by the drill)."""
        for process in self.processes:
            process.tree()

    def named(self, prefix: str) -> list[Process]:
        return [p for p in self.processes if p.name.startswith(prefix)]

    def died(self) -> list[str]:
        """Processes that exited on their own (a respawn wrapper never should)."""
        return [
            f"{p.name} (exit {p.popen.returncode})"
            for p in self.processes
            if p.popen.poll() is not None and p.name not in self.stopped_on_purpose
        ]

    def kill_command(self, process: Process) -> int | None:
        """kill -9 the command under a respawn wrapper and everything it forked (rq's scheduler
        process); the wrapper starts it again. Returns the killed pid."""
        pid = process.command_pid()
        if pid is None:
            return None
        _kill([pid, *descendants(pid)], signal.SIGKILL)
        return pid

    def stop(self) -> None:
        """SIGTERM every wrapper (its command shuts down warm), wait, then SIGKILL what is left
        of every tree. Safe to call twice."""
        for process in self.processes:
            process.tree()
            if process.popen.poll() is None:
                _kill([process.popen.pid], signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for process in self.processes:
            try:
                process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for process in self.processes:
            leftovers = [pid for pid, started in process.known if _identity(pid) == (pid, started)]
            _kill(leftovers, signal.SIGKILL)
            try:
                process.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def log_tails(self, lines: int = 15) -> str:
        parts = []
        for process in self.processes:
            try:
                text = process.log.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            parts.append(f"--- {process.log.name} ---\n" + "\n".join(text))
        return "\n".join(parts)
