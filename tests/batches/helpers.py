"""What the batch tests share: bodies, a submit helper, and a real HTTP receiver for callbacks."""

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from batches.models import Batch


def item(text: str = "Summarise: my order is late", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 64,
    }
    body.update(overrides)
    return body


def batch_body(items: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "summaries",
        "feature": "ticket-summary",
        "model": "claude-haiku-4-5",
        "items": items,
    }
    body.update(overrides)
    return body


def submit_batch(client: Any, items: list[dict[str, Any]], **overrides: Any) -> Batch:
    response = client.post("/api/v1/batches/", batch_body(items, **overrides), format="json")
    assert response.status_code == 202, response.content
    return Batch.objects.get(id=response.json()["id"])


class Receiver:
    """A real HTTP server on 127.0.0.1 recording every POST; answers the statuses given, in
    order, then 200."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": json.loads(body)}
                    )
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r["body"] for r in self.requests]


@contextmanager
def receiver(statuses: list[int] | None = None) -> Iterator[Receiver]:
    server = Receiver(statuses or [])
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
