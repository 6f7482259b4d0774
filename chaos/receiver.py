"""A real HTTP receiver for the alerts of a drill, and the alert routes that point at it.

The alerts worker delivers to it over HTTP like to any webhook, so what the drill counts is what
an on-call person would have received: one JSON body per delivery, with its fingerprint,
severity and action (alerts/delivery.py, ``_webhook_payload``). The routes exist only for the
drill: ``routes_install`` adds one webhook route per severity, ``routes_remove`` deletes them.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from django.db import transaction

from alerts.models import AlertKind, AlertRoute, Severity

__all__ = ["ROUTE_NAME", "AlertReceiver", "Received", "routes_install", "routes_remove"]

ROUTE_NAME = "llm_chaos drill receiver"


class Received:
    __slots__ = ("action", "at", "fingerprint", "payload", "severity")

    def __init__(self, payload: dict[str, Any], at: float) -> None:
        self.payload = payload
        self.at = at
        self.fingerprint = str(payload.get("fingerprint", ""))
        self.severity = str(payload.get("severity", ""))
        self.action = str(payload.get("action", ""))


class AlertReceiver:
    """ThreadingHTTPServer on 127.0.0.1 and a free port, answering 200 to every POST."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    payload = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    payload = {"unreadable": True}
                with receiver._lock:
                    receiver.received.append(Received(payload, time.monotonic()))
                body = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the drill reports what arrived; no access log on its output

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/alerts"

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.received)


@transaction.atomic
def routes_install(*, url: str) -> list[int]:
    """One webhook route per severity to the receiver. A severity with a route row no longer
    falls back to ALERT_ROUTES (alerts/destinations.py): the drill's alerts go to the receiver and
    to the rows staff configured, which the safety checks require to be none without
    --yes-really."""
    return [
        AlertRoute.objects.create(
            name=ROUTE_NAME, severity=severity, kind=AlertKind.WEBHOOK, target=url
        ).id
        for severity in Severity.values
    ]


def routes_remove(*, route_ids: list[int]) -> None:
    """The deliveries keep their record (their route becomes empty, as after any deletion)."""
    AlertRoute.objects.filter(id__in=route_ids).delete()
