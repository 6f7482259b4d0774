"""A wall-clock deadline on one provider call, enforced at its sockets.

A read timeout bounds the time between two bytes, not the call: a provider or proxy that sends a
byte a second keeps a call alive for ever. A thread cannot be interrupted, so the deadline is
enforced where the call waits, on its sockets, whatever runs the job (a forking work horse, a
``SimpleWorker``, a thread of the ``ThreadedWorker``):

- every read, write, connect and TLS handshake of the call waits at most the time left to its
  deadline, and fails once none is left (``install`` puts this under the SDK client's connection
  pools, so a pooled connection another call opened is bounded too);
- ``CallDeadline.cut`` shuts the call's sockets down from another thread (the attempt's
  heartbeat does at the deadline): a read blocked anywhere below returns at once.

The connection is then closed by the HTTP client, and the provider reports the attempt as an
unknown outcome (providers/anthropic_sdk.py); the job's runner creates the deadline and its
heartbeat cuts (jobs/runner.py).
"""

import socket
import threading
import time
from typing import Any

import httpcore2

__all__ = ["CallDeadline", "active", "install"]

_current = threading.local()


class CallDeadline:
    """The deadline of one call, ``seconds`` from now (monotonic clock)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends_at = time.monotonic() + seconds
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._running = False
        self.was_cut = False
        self.cancelled = False
        self.fenced = False

    def restart(self) -> None:
        """Count the ``seconds`` from now: the request leaves only now (it waited for its paced
        slot after the claim, ratelimits/services.py ``rate_limit_sent``). Not once fenced."""
        if not self.fenced:
            self.ends_at = time.monotonic() + self.seconds

    def left(self) -> float:
        return self.ends_at - time.monotonic()

    def passed(self) -> bool:
        return self.left() <= 0

    def bound(self, timeout: float | None, error: type[Exception]) -> float:
        """``timeout`` shortened to the time left; ``error`` once none is left."""
        left = self.left()
        if left <= 0:
            raise error(f"call deadline of {self.seconds:g} s exceeded")
        return left if timeout is None else min(timeout, left)

    def __enter__(self) -> "CallDeadline":
        """The calling thread's call, from here to the end of the block."""
        with self._lock:
            self._running = True
        _current.deadline = self
        return self

    def __exit__(self, *exc: object) -> None:
        _current.deadline = None
        with self._lock:
            self._running = False
            self._sockets.clear()

    def watch(self, sock: Any) -> None:
        if isinstance(sock, socket.socket):
            with self._lock:
                if self._running and sock not in self._sockets:
                    self._sockets.append(sock)

    def cancel(self) -> bool:
        """End the call now, from any thread, as cancelled rather than timed out: the streaming
        loop stops at its next event, and a read blocked below returns at once (``cut``)."""
        self.cancelled = True
        return self.cut()

    def fence(self) -> bool:
        """End the call now, from any thread, as cut off at its deadline: its worker could not
        renew its claim (jobs/heartbeat.py). A call that has not left yet never leaves: its
        deadline has passed, and ``restart`` no longer moves it. True if a running call was cut."""
        self.fenced = True
        self.ends_at = time.monotonic()
        return self.cut()

    def cut(self) -> bool:
        """Shut down the sockets of the call if it still runs (from any thread); True if it did.
        shutdown(), not close(): it wakes a thread blocked in recv() on the socket."""
        with self._lock:
            if not self._running:
                return False
            self.was_cut = True
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return True


def active() -> CallDeadline | None:
    """The deadline of the call the current thread is making, if any."""
    return getattr(_current, "deadline", None)


class _Stream(httpcore2.NetworkStream):
    """A connection's socket stream whose every wait stops at the current call's deadline."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def _deadline(self) -> CallDeadline | None:
        deadline = active()
        if deadline is not None:
            deadline.watch(self._inner.get_extra_info("socket"))
        return deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        deadline = self._deadline()
        if deadline is not None:
            timeout = deadline.bound(timeout, httpcore2.ReadTimeout)
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        deadline = self._deadline()
        if deadline is not None:
            timeout = deadline.bound(timeout, httpcore2.WriteTimeout)
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        deadline = self._deadline()
        if deadline is not None:
            timeout = deadline.bound(timeout, httpcore2.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore2.NetworkBackend):
    """httpcore2's network backend, with every stream it opens bounded by the call's deadline."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore2.NetworkStream:
        deadline = active()
        if deadline is not None:
            timeout = deadline.bound(timeout, httpcore2.ConnectTimeout)
        return _Stream(
            self._inner.connect_tcp(
                host,
                port,
                timeout=timeout,
                local_address=local_address,
                socket_options=socket_options,
            )
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore2.NetworkStream:
        deadline = active()
        if deadline is not None:
            timeout = deadline.bound(timeout, httpcore2.ConnectTimeout)
        return _Stream(
            self._inner.connect_unix_socket(path, timeout=timeout, socket_options=socket_options)
        )

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def install(http_client: Any) -> None:
    """Put the deadline under every connection pool of an httpx2 client (its transport and its
    proxy mounts), before it opens any connection. Raises if the client is not built as this
    expects: a call without a deadline must not pass unnoticed (tests/jobs/test_call_deadline.py
    runs this against the pinned SDK)."""
    transports = [http_client._transport, *http_client._mounts.values()]
    pools: list[Any] = [getattr(t, "_pool", None) for t in transports if t is not None]
    if not pools or any(not hasattr(pool, "_network_backend") for pool in pools):
        raise RuntimeError("the SDK's HTTP client has no connection pool to bound with a deadline")
    for pool in pools:
        if not isinstance(pool._network_backend, _Backend):
            pool._network_backend = _Backend(pool._network_backend)
