"""Alert fixtures: local HTTP receivers standing in for Slack, PagerDuty and a webhook, and a
real RQ worker on the ``alerts`` queue."""

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.db import transaction
from rq.job import Job

from alerts.models import AlertRoute
from dlq.models import FailureRecord
from dlq.services import failure_record_create
from jobs.models import LlmJob
from tests.conftest import Workers


class Receiver:
    """A threaded HTTP server that records every JSON body and answers 200, or a given status."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.requests.append({"path": self.path, "json": json.loads(raw or b"{}")})
                    status = receiver.status
                body = b"ok" if status < 400 else b"internal error"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r["json"] for r in self.requests]

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _receiver(name: str) -> Iterator[Receiver]:
    receiver = Receiver(name)
    yield receiver
    receiver.close()


@pytest.fixture
def slack() -> Iterator[Receiver]:
    yield from _receiver("slack")


@pytest.fixture
def webhook() -> Iterator[Receiver]:
    yield from _receiver("webhook")


@pytest.fixture
def pagerduty(settings: Any) -> Iterator[Receiver]:
    for receiver in _receiver("pagerduty"):
        settings.ALERT_PAGERDUTY_EVENTS_URL = receiver.url("/v2/enqueue")
        yield receiver


# Secret-looking targets: the tests check that none of them reaches a log line or an error.
SLACK_PATH = "/services/T0000SECRET/B0000SECRET/XXXXslacksecretXXXX"
WEBHOOK_PATH = "/hooks/webhook-secret-token-1234"
ROUTING_KEY = "R0UT1NGKEYSECRET0000000000009f3a"


@pytest.fixture(autouse=True)
def alert_settings(settings: Any) -> None:
    settings.ALERT_ROUTES = {}
    settings.ALERT_DEDUP_SECONDS = 600
    settings.ALERT_RETRY_SCHEDULE = [5.0, 30.0, 120.0]
    settings.ALERT_DELIVERY_TIMEOUT = 5.0
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


class AlertWorker(Workers):
    """A real RQ worker on the alerts queue, in burst mode, fast-forwarding scheduled retries."""

    def __init__(self) -> None:
        super().__init__("alerts")

    def scheduled_with_delays(self) -> list[tuple[Job, float]]:
        """Scheduled jobs with their delay from now, in seconds."""
        from rq.utils import now

        registry = self.queue.scheduled_job_registry
        out = []
        for job_id in registry.get_job_ids():
            job = Job.fetch(job_id, connection=self.queue.connection)
            when = registry.get_scheduled_time(job)
            out.append((job, (when - now()).total_seconds()))
        return out


@pytest.fixture
def alert_worker() -> AlertWorker:
    return AlertWorker()


@pytest.fixture
def route(db: None) -> Callable[..., AlertRoute]:
    def make(severity: str, kind: str, target: str, enabled: bool = True) -> AlertRoute:
        return AlertRoute.objects.create(
            severity=severity, kind=kind, target=target, enabled=enabled, name=f"{kind} test"
        )

    return make


def dead_letter(job: LlmJob, *, severity: str, reason_code: str, **extra: Any) -> FailureRecord:
    """Dead-letter a job as the runner does: inside a transaction, so the hook fires on commit."""
    with transaction.atomic():
        return failure_record_create(
            job=job, severity=severity, reason_code=reason_code, message="boom", **extra
        )
