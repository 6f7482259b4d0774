"""A fork server for the tool calls of a threaded worker: a process forked from the worker once,
that forks each call's child in its place.

Forking the worker itself for every call costs more than the fork: from the fork until the
child's exit every page of the worker is shared copy-on-write, and the worker's other threads,
which go on running Python, fault on each page they write. The fork server is a copy of the
worker that runs nothing but this loop, so the pages its children share are never written
to by anyone else. The agents worker starts one as it starts to work and stops it at the end
(``fork_server_start``, from runtime/workers.py); any other process forks its calls itself.

What a call's child does (agents/tool_processes.py) is the same either way: a process group of
its own, ``PR_SET_PDEATHSIG`` (here to the fork server, which has its own to the worker: a
worker killed with ``-9`` takes the server, and the server its calls), the answer over the pipe
the worker made, ``os._exit``. The server forks, says the child's pid, and reaps the child only
when the worker asks, after the worker's kill: the pid cannot be reused while the worker may
still signal it.

The server serves only the tools registered when it was forked (``served``: the same objects,
so the same code); a tool registered later, or a request too long for one message, is forked
by the worker itself. A keeper thread in the worker waits for the server and starts another if
it dies; meanwhile calls fork in the worker. Why: docs/architecture.md, "Agent runs".
"""

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

from agents.tool_processes import locked_fork, make_child_safe, run_child, set_process_name

__all__ = ["ForkServer", "fork_server", "fork_server_start", "fork_server_stop"]

logger = logging.getLogger(__name__)

PROCESS_NAME = b"llmops-forksrv"
"""What ``ps -o comm`` and ``top`` show for the server (its command line is the worker's)."""
MAX_REQUEST_BYTES = 60_000
"""A request longer than this (a tool input of that size) is forked by the worker itself: one
datagram of a SOCK_SEQPACKET pair holds it whatever the socket buffers."""
REPLY_TIMEOUT_SECONDS = 30.0
"""A server that does not answer within this is taken for stuck, killed and started again."""
RESTART_PAUSE_SECONDS = 1.0

Serve = Callable[[str, dict[str, Any]], Any]
"""Runs one served call in the server's child: (name, keyword arguments) -> the answer."""


class ForkServer:
    """The worker's side: one request at a time over a socket pair, under a lock."""

    def __init__(self, *, serve: Serve) -> None:
        self._serve = serve
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._pid = 0
        self._owner = os.getpid()
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._keeper = threading.Thread(target=self._keep, name="tool-fork-server", daemon=True)

    # The worker's side ---------------------------------------------------------------------

    def start(self, *, wait: float = 10.0) -> None:
        self._keeper.start()
        self._started.wait(wait)

    def usable(self) -> bool:
        return os.getpid() == self._owner and self._socket is not None

    def spawn(self, name: str, kwargs: dict[str, Any], answer_fd: int) -> int | None:
        """Fork a child that runs ``name`` and writes its answer to ``answer_fd``: its pid; None
        when the server cannot take the request (not running, too long, or its fork failed):
        fork it yourself.
        Raises OSError when the request went out and no pid came back (the server is killed:
        whatever it had started dies with it)."""
        request = json.dumps({"op": "spawn", "name": name, "kwargs": kwargs}).encode()
        if len(request) > MAX_REQUEST_BYTES:
            return None
        with self._lock:
            sock = self._socket
            if sock is None or os.getpid() != self._owner:
                return None
            try:
                socket.send_fds(sock, [request], [answer_fd])
            except OSError:
                return None  # the server is gone: the request never reached it
            pid = self._reply(sock)["pid"]
            return int(pid) if pid is not None else None  # None: the server could not fork

    def reap(self, pid: int) -> int | None:
        """The exit status of a child the server forked (killed already); None when not known
        (the server died: its children went with it)."""
        with self._lock:
            sock = self._socket
            if sock is None:
                return None
            try:
                sock.sendall(json.dumps({"op": "reap", "pid": pid}).encode())
                status = self._reply(sock)["status"]
            except OSError:
                return None
            return int(status) if status is not None else None

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            self._kill_server()
        self._keeper.join(10)

    def _reply(self, sock: socket.socket) -> dict[str, Any]:
        try:
            data = sock.recv(4096)
        except OSError:
            self._kill_server()
            raise
        if not data:
            self._kill_server()
            raise ConnectionError("the tool fork server ended")
        return dict(json.loads(data))

    def _kill_server(self) -> None:
        """Under the lock. The keeper reaps it and starts another."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)

    def _keep(self) -> None:
        """Fork the server from this thread (its parent-death signal is this thread's end: the
        worker's), wait for it, and start another if it dies."""
        while not self._stopping.is_set():
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ours.settimeout(REPLY_TIMEOUT_SECONDS)
            pid = self._fork(theirs, ours)
            theirs.close()
            if pid is None:
                ours.close()
                self._started.set()
                self._stopping.wait(RESTART_PAUSE_SECONDS * 10)
                continue
            with self._lock:
                self._pid = pid
            ready = _ready(ours)  # its set-up done: it may take calls
            with self._lock:
                if ready and not self._stopping.is_set():
                    self._socket = ours
                else:
                    self._kill_server()
            self._started.set()
            _, status = os.waitpid(pid, 0)
            with self._lock:
                if self._socket is ours:
                    self._socket = None
                ours.close()
                self._pid = 0
            if not self._stopping.is_set():
                logger.warning(
                    "the tool fork server ended (status %s); tool calls fork in the worker "
                    "until another starts",
                    status,
                )
                self._stopping.wait(RESTART_PAUSE_SECONDS)

    def _fork(self, theirs: socket.socket, ours: socket.socket) -> int | None:
        parent = os.getpid()
        pid = locked_fork("the tool fork server")
        if pid == 0:
            code = 1
            try:
                ours.close()
                make_child_safe(parent)
                set_process_name(PROCESS_NAME)
                _forget_inherited_fds(keep=theirs.fileno())
                code = _Server(theirs, self._serve).loop()
            finally:
                os._exit(code)
        return pid


class _Server:
    """The server's side: a single thread, forking on request and reaping on request."""

    def __init__(self, sock: socket.socket, serve: Serve) -> None:
        self._socket = sock
        self._serve = serve
        self._children: set[int] = set()

    def loop(self) -> int:
        self._socket.sendall(b'{"ready": true}')
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self._socket, MAX_REQUEST_BYTES + 1024, 1)
            except OSError:
                return 1
            if not message:
                return 0  # the worker closed its end, or ended
            request = json.loads(message)
            if request["op"] == "spawn":
                reply: dict[str, Any] = {"pid": self._spawn(request, fds[0])}
            else:
                reply = {"status": self._reap(int(request["pid"]))}
            self._socket.sendall(json.dumps(reply).encode())

    def _spawn(self, request: dict[str, Any], answer_fd: int) -> int | None:
        """The child's pid; None when this fork failed (a pid or memory limit reached): that
        call alone is refused (the worker forks it itself), and the server, with the calls it
        has running, goes on."""
        server = os.getpid()
        name, kwargs = request["name"], request["kwargs"]
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(answer_fd)
            logger.warning("the tool fork server could not fork %s's process: %s", name, exc)
            return None
        if pid == 0:
            self._socket.close()
            run_child(lambda: self._serve(name, kwargs), server, answer_fd)
        os.close(answer_fd)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # as the child does: the group exists whoever runs first
        self._children.add(pid)
        return pid

    def _reap(self, pid: int) -> int | None:
        if pid not in self._children:
            return None
        self._children.discard(pid)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return None
        return status


def _ready(sock: socket.socket) -> bool:
    try:
        return bool(json.loads(sock.recv(4096) or b"{}").get("ready"))
    except (OSError, ValueError):
        return False


def _forget_inherited_fds(*, keep: int) -> None:
    """In the server: every file descriptor it inherited, but for stdio, its socket and the log
    handlers' streams, made ``/dev/null``. It lives as long as the worker, and a descriptor it
    kept open would keep what the worker closes open (a ``flock`` taken through it stays held
    until every copy is closed, a socket's peer never sees its end). Overwritten rather than
    closed: the objects that own them (a Redis client's socket, a session put aside) still
    close their number when freed, and a closed number could by then be another file's."""
    kept = {0, 1, 2, keep}
    for handler in logging.getLogger().handlers + [
        h
        for logger_ in logging.root.manager.loggerDict.values()
        for h in getattr(logger_, "handlers", [])
    ]:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            kept.add(handler.stream.fileno())  # type: ignore[attr-defined]
    null = os.open(os.devnull, os.O_RDWR)
    kept.add(null)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in kept:
            with contextlib.suppress(OSError):  # the listing's own, closed by now
                os.dup2(null, fd)


_server: ForkServer | None = None
_stopped_at_exit = False


def fork_server() -> ForkServer | None:
    """This process's fork server, if it started one and it is running."""
    server = _server
    return server if server is not None and server.usable() else None


def fork_server_start(*, serve: Serve) -> ForkServer:
    """Start this process's fork server (once), from a thread that lives as long as the
    process; returns once it runs (or could not start: calls then fork in this process)."""
    global _server, _stopped_at_exit
    if _server is not None and _server._owner == os.getpid():
        return _server
    if not _stopped_at_exit:
        atexit.register(fork_server_stop)  # reaped at the process's end, not left to init
        _stopped_at_exit = True
    _server = ForkServer(serve=serve)
    _server.start()
    return _server


def fork_server_stop() -> None:
    global _server
    if _server is not None and _server._owner == os.getpid():
        _server.stop()
    _server = None
