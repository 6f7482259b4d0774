"""Running one tool call in a child process of its own, so that its timeout can stop it.

The worker forks (the tools were registered at import, so the child has them), the child runs
the call and sends what it gave back over a pipe, and at the timeout the parent kills the
child's process group with ``SIGKILL`` and reaps it: a call answered "timed out" is no longer
running and does nothing more. A thread could only have been left behind, still running.

The worker is multithreaded, and a forked child keeps only the thread that forked, so the child
first makes itself safe to run (``make_child_safe``) and leaves with ``os._exit``, never running the
parent's exit handlers. Why each step, and what a call costs: docs/architecture.md, "Tools".
"""

import contextlib
import ctypes
import gc
import json
import logging
import os
import select
import signal
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from django.db import connections

__all__ = [
    "ChildEnd",
    "call_in_child",
    "locked_fork",
    "make_child_safe",
    "run_child",
    "set_process_name",
]

logger = logging.getLogger(__name__)


class ForkServer(Protocol):
    """What forks a call in this process's place (agents/fork_server.py)."""

    def spawn(self, name: str, kwargs: dict[str, Any], answer_fd: int) -> int | None: ...

    def reap(self, pid: int) -> int | None: ...


_HEADER = struct.Struct(">Q")
"""Each answer is its length, then its JSON. The pipe's end of file cannot say that the answer
is complete: a child forked meanwhile by another thread holds the write end too."""
_READ_CHUNK = 1 << 16
_EXIT_NO_ANSWER = 70
"""The child's exit code when it could not even send an answer (os.EX_SOFTWARE)."""
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
CALL_PROCESS_NAME = b"llmops-toolcall"
"""What ``ps -o comm`` and ``top`` show for a tool call's process (15 bytes at most)."""

try:  # resolved here, in the parent: the child must not load anything (the loader's lock)
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: no parent-death signal, the timeout still holds
    _prctl = None

_fork_lock = threading.Lock()
"""One fork at a time, so that turning the collector off around a fork is not undone by another
thread's fork in between."""
_collecting = True
"""Whether the collector ran before the fork under way (``locked_fork``): the child turns it back
on after its freeze."""
_KILLED_WITHIN_SECONDS = 5.0
"""How long a fork server's child may take to die of its SIGKILL before the server reaps it."""


@dataclass(frozen=True)
class ChildEnd:
    """How a child ended: with its ``answer``, stopped at its timeout, or without an answer
    (``how`` says why: an exit code or a signal)."""

    answer: Any = None
    timed_out: bool = False
    how: str = ""


def call_in_child(
    work: Callable[[], Any],
    *,
    timeout: float,
    server: ForkServer | None = None,
    served: tuple[str, dict[str, Any]] | None = None,
) -> ChildEnd:
    """Run ``work`` in a forked child and return its JSON-serialisable answer; at ``timeout``
    seconds the child (and whatever it started in its process group) is killed. Whatever
    happens, the child is reaped before this returns: no process, zombie or thread is left.
    ``served``: the same call as (name, keyword arguments), for ``server`` (this process's fork
    server, agents/fork_server.py) to fork instead, when it can."""
    read_end, write_end = os.pipe()
    pid: int | None = None
    if server is not None and served is not None:
        try:
            pid = server.spawn(served[0], served[1], write_end)
        except (OSError, ValueError, KeyError) as exc:
            os.close(read_end)
            os.close(write_end)
            return ChildEnd(how=f"the tool fork server did not answer: {exc}")
    if pid is None:
        server = None
        pid = _fork(work, read_end, write_end)
        if pid is None:
            os.close(read_end)
            os.close(write_end)
            return ChildEnd(how="it could not start")
    os.close(write_end)
    pidfd = -1
    try:
        pidfd = os.pidfd_open(pid)  # Linux 5.3 or later; a fork server's child too
        answered, answer = _wait(read_end=read_end, pidfd=pidfd, timeout=timeout)
    finally:
        status = _stop(pid, server, pidfd)
        os.close(read_end)
        if pidfd >= 0:
            os.close(pidfd)
    if answered:
        return ChildEnd(answer=answer)
    if answer is _TIMED_OUT:
        return ChildEnd(timed_out=True)
    if status is None:
        return ChildEnd(how="its fork server ended" if server else "how is not known")
    return ChildEnd(how=_how_it_ended(status))


def locked_fork(what: str) -> int | None:
    """``os.fork`` of this (multithreaded) process, one fork at a time and with no collection
    between the fork and the child's freeze (``make_child_safe``: the parent's other threads'
    objects are garbage in the child, and freeing some would do harm): 0 in the child, the
    child's pid in the parent, None (logged, naming ``what``) when it could not fork."""
    global _collecting
    parent_pid = os.getpid()
    with _fork_lock:
        _collecting = gc.isenabled()
        gc.disable()
        try:
            return os.fork()
        except OSError as exc:
            logger.warning("%s could not start: %s", what, exc)
            return None
        finally:
            if _collecting and os.getpid() == parent_pid:
                gc.enable()


def _fork(work: Callable[[], Any], read_end: int, write_end: int) -> int | None:
    parent_pid = os.getpid()
    pid = locked_fork("a tool call's process")
    if pid is None:
        return None
    if pid == 0:
        os.close(read_end)
        run_child(work, parent_pid, write_end)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # as the child does: the group exists whoever runs first
    return pid


_TIMED_OUT = object()


def _wait(*, read_end: int, pidfd: int, timeout: float) -> tuple[bool, Any]:
    """(True, the answer), or (False, _TIMED_OUT), or (False, None): it ended without one."""
    os.set_blocking(read_end, False)
    poller = select.poll()
    poller.register(read_end, select.POLLIN)
    poller.register(pidfd, select.POLLIN)  # readable once the child has ended
    received = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False, _TIMED_OUT
        ready = {fd for fd, _ in poller.poll(remaining * 1000)}
        _read_available(read_end, received)  # after the child's end too: its last bytes
        answer = _complete_answer(received)
        if answer is not None:
            return True, answer[0]
        if pidfd in ready:
            return False, None


def _read_available(read_end: int, received: bytearray) -> None:
    while True:
        try:
            chunk = os.read(read_end, _READ_CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            return
        received += chunk


def _complete_answer(received: bytearray) -> tuple[Any] | None:
    if len(received) < _HEADER.size:
        return None
    (length,) = _HEADER.unpack_from(received)
    if len(received) < _HEADER.size + length:
        return None
    return (json.loads(bytes(received[_HEADER.size : _HEADER.size + length])),)


def _stop(pid: int, server: ForkServer | None, pidfd: int) -> int | None:
    """Kill the child and its process group, and reap it: its exit status (None: not known)."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)
    if server is not None:
        if pidfd >= 0:  # dead, so that the server's reap does not wait
            select.select([pidfd], [], [], _KILLED_WITHIN_SECONDS)
        return server.reap(pid)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:  # reaped by someone else: nothing is known of how it ended
        return None
    return status


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def run_child(work: Callable[[], Any], parent_pid: int, write_end: int) -> NoReturn:
    """In the forked child: make it safe, run ``work``, send its answer, leave."""
    code = _EXIT_NO_ANSWER
    try:
        make_child_safe(parent_pid)
        answer = json.dumps(work(), ensure_ascii=False).encode()
        connections.close_all()  # the child's own connections (the parent's were put aside)
        _write_all(write_end, _HEADER.pack(len(answer)) + answer)
        code = 0
    finally:
        os._exit(code)


_put_aside: list[Any] = []
"""In a child, the parent's connections of the thread that forked: kept, never closed."""


def make_child_safe(parent_pid: int) -> None:
    """Make a child forked by ``locked_fork`` (or by the fork server) safe to run a tool in."""
    # The parent's other threads did not come along, and whatever only they referred to
    # (their thread-local database connections among it) is garbage here. Freed, a MySQL
    # connection says goodbye to the server on the socket the parent still uses, ending the
    # parent's session: keep all of it, never collected (it is the parent's memory anyway).
    gc.freeze()
    if _collecting:
        gc.enable()
    os.setpgid(0, 0)  # a group of its own: killing it also ends what the tool started
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the worker killed -9: so is the call
    set_process_name(CALL_PROCESS_NAME)
    if os.getppid() != parent_pid:
        os._exit(_EXIT_NO_ANSWER)  # the worker died before the line above
    # The parent's Python signal handlers (rq's warm shutdown) are not the child's. A SIGTERM
    # or SIGINT that reaches the child anyway (a unit with KillMode=control-group signals every
    # process; deploy/systemd's use KillMode=mixed, the worker alone) is the worker's to act
    # on: the call runs on to its end or its timeout, as a deploy's warm shutdown expects. A
    # Python handler, not SIG_IGN, so that a program the tool runs gets the default back.
    for number in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError, TypeError):
            if callable(signal.getsignal(number)):
                signal.signal(number, signal.SIG_DFL)
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, _ignore)
    # This thread's open connections are the parent's sessions: put them aside, unclosed
    # (closing one would end it for the parent too); the tool gets fresh ones of its own.
    _put_aside.extend(connections.all(initialized_only=True))
    for connection in _put_aside:
        del connections[connection.alias]


def set_process_name(name: bytes) -> None:
    """The name ``ps -o comm``, ``top`` and ``pgrep`` show (the command line stays)."""
    if _prctl is not None:
        _prctl(_PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)


def _ignore(signal_number: int, frame: Any) -> None:
    pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
