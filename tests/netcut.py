"""NetCut: a TCP forwarder a test puts between a process and a server, to cut it off for real.

A process started with its database or Redis URL pointing at ``NetCut.port`` talks to the real
server through it. ``cut()`` closes every open connection (both ends, as a dead link or a
restarted server would) and closes every new one as soon as it is accepted, until ``restore()``.
The test process keeps its own direct connections, so it can act while the other is cut off.

``freeze()`` is the other way a path fails: bytes stop and connections stay open (a dropped
link, a partition), until ``thaw()``, when what was held goes through. A new connection made
while frozen is accepted (as a kernel accepts before the application looks) and reaches its
server only at the thaw: its handshake waits as a SYN lost on a dead path would.
"""

import socket
import threading
from types import TracebackType

__all__ = ["NetCut"]

ACCEPT_POLL_SECONDS = 0.1
"""How often the accept loop looks at the close flag (a blocked accept() is not woken by close)."""


class NetCut:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(ACCEPT_POLL_SECONDS)
        self.port: int = self.listener.getsockname()[1]
        self.is_cut = threading.Event()
        self._flowing = threading.Event()
        self._flowing.set()
        self.closed = threading.Event()
        self.accepted = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._accepter = threading.Thread(
            target=self._accept_loop, daemon=True, name=f"netcut-{self.port}"
        )
        self._accepter.start()

    def __enter__(self) -> "NetCut":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def cut(self) -> None:
        """Close every open connection; new ones are closed as soon as they are accepted."""
        self.is_cut.set()
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            _shut(sock)

    def freeze(self) -> None:
        """Stop every byte, both ways, on open and new connections; close nothing."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Let the bytes held by ``freeze`` through, and every later one."""
        self._flowing.set()

    @property
    def frozen(self) -> bool:
        return not self._flowing.is_set()

    def restore(self) -> None:
        """Forward new connections again (the ones closed by ``cut`` stay closed)."""
        self.is_cut.clear()

    def close(self) -> None:
        self.closed.set()
        self._flowing.set()
        self.cut()
        self._accepter.join(timeout=5)
        self.listener.close()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._open) // 2

    def _accept_loop(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if not self._flowing.is_set():
                # Frozen: the connection reaches its server at the thaw, on a thread of its own.
                threading.Thread(
                    target=self._connect_when_thawed, args=(client,), daemon=True
                ).start()
                continue
            self._connect(client)

    def _connect_when_thawed(self, client: socket.socket) -> None:
        self._flowing.wait()
        if not self.closed.is_set():
            self._connect(client)
        else:
            _shut(client)

    def _connect(self, client: socket.socket) -> None:
        if self.is_cut.is_set():
            self.refused += 1
            _shut(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _shut(client)
            return
        upstream.settimeout(None)
        with self._lock:
            if self.is_cut.is_set():
                pair_open = False
            else:
                self._open.update((client, upstream))
                pair_open = True
        if not pair_open:
            self.refused += 1
            _shut(client)
            _shut(upstream)
            return
        self.accepted += 1
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(
                target=self._pump, args=(source, sink), daemon=True, name="netcut-pump"
            ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._flowing.wait()  # frozen: held here, and the sender's buffers fill
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
            _shut(source)
            _shut(sink)


def _shut(sock: socket.socket) -> None:
    # shutdown() wakes a thread blocked in recv() on this socket (close() alone does not) and
    # sends the peer its end of stream.
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
