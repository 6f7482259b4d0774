"""What the webhook tests share: a real HTTP receiver (a threaded http.server on a free port of
127.0.0.1) that keeps every request's raw body and headers, and a signature check written from
the docs (docs/api.md#webhooks), not from the product's code."""

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """Records every POST; answers the statuses given, in order, then 200. With ``hang_first``,
    the first request is read whole and then held unanswered until ``release()``."""

    def __init__(self, statuses: list[int], *, hang_first: bool = False) -> None:
        self.statuses = list(statuses)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.hang_first = hang_first
        self.released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "raw": raw}
                    )
                    first = len(receiver.requests) == 1
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                if first and receiver.hang_first:
                    receiver.released.wait(60)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                except OSError:
                    pass  # the sender is gone (killed mid-request)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def release(self) -> None:
        self.released.set()

    def wait_for(self, count: int, *, seconds: float = 30) -> list[dict[str, Any]]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.05)
        raise AssertionError(f"the receiver got {len(self.requests)} requests, not {count}")

    @property
    def bodies(self) -> list[Any]:
        with self.lock:
            return [json.loads(r["raw"]) for r in self.requests]


@contextmanager
def receiver(statuses: list[int] | None = None, *, hang_first: bool = False) -> Iterator[Receiver]:
    server = Receiver(statuses or [], hang_first=hang_first)
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release()
        server.server.shutdown()
        server.server.server_close()


def signature_ok(request: dict[str, Any], secret: str, *, tolerance: float = 300) -> bool:
    """A receiver's check, as docs/api.md shows it: HMAC-SHA256 of ``<t>.<raw body>`` under the
    secret equals one ``v1`` of ``LLM-Signature``, and ``t`` is recent."""
    parts = [p.split("=", 1) for p in request["headers"]["LLM-Signature"].split(",")]
    timestamp = next(value for name, value in parts if name == "t")
    signatures = [value for name, value in parts if name == "v1"]
    signed = timestamp.encode() + b"." + request["raw"]
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    recent = abs(time.time() - int(timestamp)) < tolerance
    return recent and any(hmac.compare_digest(expected, s) for s in signatures)
