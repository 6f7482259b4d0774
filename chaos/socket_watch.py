"""The drill's WebSocket: a client of the drill's own web server, authenticated with an API token
as a script would be (the ``token, <key>`` subprotocol pair), listening to the drill user's job
events on a thread of its own, and noting when it is closed, by whom and with which code."""

import threading
import time
from contextlib import ExitStack

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

__all__ = ["SocketWatch"]

OPEN_TIMEOUT_SECONDS = 10.0


class SocketWatch:
    """Open at construction (raises if the handshake fails); ``stop`` closes it from our side."""

    def __init__(self, *, url: str, token: str) -> None:
        self._lock = threading.Lock()
        self.heard: list[float] = []
        """Monotonic times of every message received."""
        self.closed_at: float | None = None
        self.close_code: int | None = None
        """The code of the server's close frame; None when none came (the connection died)."""
        self.error = ""
        protocols = [Subprotocol("token"), Subprotocol(token)]
        self._exit = ExitStack()
        self.ws: ClientConnection = self._exit.enter_context(
            connect(url, subprotocols=protocols, open_timeout=OPEN_TIMEOUT_SECONDS)
        )
        self.thread = threading.Thread(target=self._listen, name="chaos-socket", daemon=True)
        self.thread.start()

    def _listen(self) -> None:
        try:
            while True:
                try:
                    self.ws.recv(timeout=1.0)
                except TimeoutError:
                    continue
                with self._lock:
                    self.heard.append(time.monotonic())
        except ConnectionClosed as closed:
            received = closed.rcvd
            self.close_code = received.code if received is not None else None
        except Exception as exc:  # noqa: BLE001 - noted in the report, never raised
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.closed_at = time.monotonic()

    @property
    def is_open(self) -> bool:
        return self.closed_at is None

    def heard_between(self, start: float, end: float = float("inf")) -> int:
        with self._lock:
            return sum(1 for at in self.heard if start <= at < end)

    def stop(self) -> None:
        try:
            self._exit.close()
        except Exception:  # noqa: BLE001, S110 - closing a socket already gone
            pass
        self.thread.join(timeout=5)
