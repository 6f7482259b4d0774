"""Running one tool call in a child process of its own, so that its timeout can stop it.

The worker forks (the tools were registered at import, so the child has them), the child runs
the call and sends what it gave back over a pipe, and at the timeout the parent kills the
child's process group with ``SIGKILL`` and reaps it: a call answered "timed out" is no longer
running and does nothing more. A thread could only have been left behind, still running.

The worker is multithreaded, and a forked child keeps only the thread that forked, so the child
first makes itself safe to run (``_child_start``) and leaves with ``os._exit``, never running the
parent's exit handlers. Why each step, and what a call costs: docs/architecture.md, "Tools".
"""

import contextlib
import ctypes
import gc
import json
import os
import select
import signal
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from django.db import connections

__all__ = ["ChildEnd", "call_in_child"]

_HEADER = struct.Struct(">Q")
"""Each answer is its length, then its JSON. The pipe's end of file cannot say that the answer
is complete: a child forked meanwhile by another thread holds the write end too."""
_READ_CHUNK = 1 << 16
_EXIT_NO_ANSWER = 70
"""The child's exit code when it could not even send an answer (os.EX_SOFTWARE)."""
_PR_SET_PDEATHSIG = 1

try:  # resolved here, in the parent: the child must not load anything (the loader's lock)
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: no parent-death signal, the timeout still holds
    _prctl = None

_fork_lock = threading.Lock()
"""One fork at a time, so that turning the collector off around a fork is not undone by another
thread's fork in between."""


@dataclass(frozen=True)
class ChildEnd:
    """How a child ended: with its ``answer``, stopped at its timeout, or without an answer
    (``how`` says why: an exit code or a signal)."""

    answer: Any = None
    timed_out: bool = False
    how: str = ""


def call_in_child(work: Callable[[], Any], *, timeout: float) -> ChildEnd:
    """Run ``work`` in a forked child and return its JSON-serialisable answer; at ``timeout``
    seconds the child (and whatever it started in its process group) is killed. Whatever
    happens, the child is reaped before this returns: no process, zombie or thread is left."""
    read_end, write_end = os.pipe()
    parent_pid = os.getpid()
    with _fork_lock:
        collecting = gc.isenabled()
        # No collection between the fork and the child's freeze (_child_start): the parent's
        # other threads' objects are garbage in the child, and freeing some would do harm.
        gc.disable()
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(read_end)
            os.close(write_end)
            return ChildEnd(how=f"it could not start: {exc}")
        finally:
            if collecting and os.getpid() == parent_pid:
                gc.enable()
        if pid == 0:
            _child(work, read_end, write_end, parent_pid=parent_pid, collecting=collecting)
    os.close(write_end)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # as the child does: the group exists whoever runs first
    pidfd = -1
    try:
        pidfd = os.pidfd_open(pid)  # Linux 5.3 or later
        answered, answer = _wait(read_end=read_end, pidfd=pidfd, timeout=timeout)
    finally:
        status = _stop(pid)
        os.close(read_end)
        if pidfd >= 0:
            os.close(pidfd)
    if answered:
        return ChildEnd(answer=answer)
    if answer is _TIMED_OUT:
        return ChildEnd(timed_out=True)
    return ChildEnd(how=_how_it_ended(status))


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


def _stop(pid: int) -> int:
    """Kill the child and its process group, and reap it: its exit status."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:  # reaped by someone else: nothing is known of how it ended
        return 0
    return status


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _child(
    work: Callable[[], Any], read_end: int, write_end: int, *, parent_pid: int, collecting: bool
) -> NoReturn:
    code = _EXIT_NO_ANSWER
    try:
        os.close(read_end)
        _child_start(parent_pid, collecting=collecting)
        answer = json.dumps(work(), ensure_ascii=False).encode()
        connections.close_all()  # the child's own connections (the parent's were put aside)
        _write_all(write_end, _HEADER.pack(len(answer)) + answer)
        code = 0
    finally:
        os._exit(code)


_put_aside: list[Any] = []
"""In a child, the parent's connections of the thread that forked: kept, never closed."""


def _child_start(parent_pid: int, *, collecting: bool) -> None:
    """Make the forked child safe to run a tool in."""
    # The parent's other threads did not come along, and whatever only they referred to
    # (their thread-local database connections among it) is garbage here. Freed, a MySQL
    # connection says goodbye to the server on the socket the parent still uses, ending the
    # parent's session: keep all of it, never collected (it is the parent's memory anyway).
    gc.freeze()
    if collecting:
        gc.enable()
    os.setpgid(0, 0)  # a group of its own: killing it also ends what the tool started
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the worker killed -9: so is the call
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


def _ignore(signal_number: int, frame: Any) -> None:
    pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
