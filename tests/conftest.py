"""Shared fixtures: real Redis (an empty database index, flushed around each test), the real
database (MariaDB in CI), the project's fake provider over HTTP, and real RQ workers."""

import importlib
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import django_rq
import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.utils import timezone
from rest_framework.test import APIClient
from rq import SimpleWorker
from rq.job import Job

from jobs.models import LlmJob
from jobs.selectors import DUE_TOLERANCE_SECONDS
from keys.testing import api_key_for
from llmops.queues import RUN_LLM_JOB_TASK

ROOT = Path(__file__).resolve().parent.parent
seed_prices = importlib.import_module("ledger.migrations.0002_seed_claude_prices")
seed_providers = importlib.import_module("providers.migrations.0001_initial")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeProvider:
    """Handle on a running `manage.py fake_anthropic` process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=10)

    def faults(self, faults: dict[str, float], **extra: Any) -> None:
        self.http.post("/_fake/faults", json={"faults": faults, **extra}).raise_for_status()

    def reset(self) -> None:
        self.http.post("/_fake/reset").raise_for_status()

    def stats(self) -> dict[str, Any]:
        return self.http.get("/_fake/stats").json()

    def arrivals(self) -> list[float]:
        """When each request since the last reset arrived (epoch seconds, oldest first)."""
        return list(self.http.get("/_fake/arrivals").json()["arrivals"])


@pytest.fixture(scope="session")
def fake_provider_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeProvider]:
    port = _free_port()
    # Its output goes to a file: a pipe nobody reads would block the provider once it filled.
    log = tmp_path_factory.mktemp("fake_provider") / "fake_provider.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "fake_anthropic", "--port", str(port), "--seed", "7"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=1) as probe:
        while True:
            try:
                if probe.get(f"{url}/_fake/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait(timeout=10)
                raise RuntimeError(f"fake provider did not start: {log.read_text()[-3000:]!r}")
            time.sleep(0.1)
    yield FakeProvider(url)
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def fake_provider(fake_provider_process: FakeProvider, settings: Any) -> FakeProvider:
    fake_provider_process.reset()
    settings.ANTHROPIC_BASE_URL = fake_provider_process.url
    return fake_provider_process


_DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "live_server"}


def _uses_redis(request: pytest.FixtureRequest) -> bool:
    """Tests of the database use Redis too (submits enqueue, workers run); a pure test (the
    retry table, pricing, validation) needs neither, unless marked ``redis``."""
    node = request.node
    return bool(
        node.get_closest_marker("redis")
        or node.get_closest_marker("django_db")
        or _DATABASE_FIXTURES.intersection(request.fixturenames)
    )


@pytest.fixture(autouse=True)
def redis_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """The test's Redis index, empty before and after each test that uses Redis."""
    if not _uses_redis(request):
        yield
        return
    connection = django_rq.get_connection("llm")
    assert connection.connection_pool.connection_kwargs.get("db") == int(
        os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15").rsplit("/", 1)[-1] or 0
    )
    connection.flushdb()
    yield
    connection.flushdb()


@pytest.fixture(autouse=True)
def fresh_channel_layer() -> Iterator[None]:
    """Each test gets channel-layer instances of its own: channels-redis binds its receive locks
    to the event loop that first used them, so a receive one test's loop left behind (cut off
    by a timeout) would otherwise block, or fail, every later socket of this worker."""
    yield
    from channels.layers import channel_layers

    channel_layers.backends.clear()


@pytest.fixture(autouse=True)
def fast_settings(settings: Any) -> None:
    # Real schedules, compressed in time; tests that check delays set the scale back to 1.
    settings.LLM_RETRY_DELAY_SCALE = 0.001
    settings.LLM_STREAM_IDLE_SECONDS = 5.0
    settings.LLM_HEARTBEAT_SECONDS = 1.0
    # The test process builds workers in process: it must not lower its own CPU priority (the
    # worker processes tests start take WORKER_NICE from their environment, as in production).
    settings.WORKER_NICE = 0
    settings.PASSWORD_HASHERS = ["tests.hashers.FastPBKDF2PasswordHasher"]


@pytest.fixture
def no_breaker(settings: Any) -> None:
    """For tests of the DLQ and alert dedup that build 401 storms: every job dead-letters on its
    own instead of the provider circuit breaker holding the rest (tests/jobs/test_breaker.py)."""
    settings.LLM_BREAKER_ENABLED = False


def _in_a_transaction(request: pytest.FixtureRequest) -> bool:
    """A database test rolled back at its end (not a transactional one, which flushes)."""
    marker = request.node.get_closest_marker("django_db")
    if marker is not None:
        return not (marker.kwargs.get("transaction") or (marker.args and marker.args[0]))
    return "db" in request.fixturenames and not _FLUSHING_FIXTURES.intersection(
        request.fixturenames
    )


_FLUSHING_FIXTURES = {"transactional_db", "live_server", "django_db_reset_sequences"}


@pytest.fixture(autouse=True)
def seeded_prices(request: pytest.FixtureRequest) -> None:
    """The prices a data migration seeds, in every database test that runs in a transaction:
    a transactional test that ran before it on this worker flushed them (tests/parallel.py
    starts the slow ones, mostly transactional, first). One query when they are there."""
    if not _in_a_transaction(request):
        return
    request.getfixturevalue("db")
    from django.apps import apps

    from ledger.models import ModelPrice

    if not ModelPrice.objects.exists():
        seed_providers.seed(apps, None)
        seed_prices.seed(apps, None)


@pytest.fixture
def prices(django_db_blocker: Any) -> None:
    """Transactional tests flush the tables, data-migration rows included: seed them again."""
    from django.apps import apps

    seed_providers.seed(apps, None)
    seed_prices.seed(apps, None)


def _user(username: str) -> Any:
    return get_user_model().objects.create_user(username=username, password="pw-" + username)


def make_user(
    username: str,
    *perms: str,
    is_staff: bool = False,
    password: str = "pw",
    superuser: bool = False,
) -> Any:
    """A user holding the given permissions, by codename (e.g. ``requeue_failurerecord``)."""
    user = get_user_model().objects.create_user(
        username=username, password=password, is_staff=is_staff, is_superuser=superuser
    )
    user.user_permissions.add(*Permission.objects.filter(codename__in=perms))
    return user


def _client_for(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(user)}")
    return client


@pytest.fixture
def alice(db: None) -> Any:
    return _user("alice")


@pytest.fixture
def bob(db: None) -> Any:
    return _user("bob")


@pytest.fixture
def alice_client(alice: Any) -> APIClient:
    return _client_for(alice)


@pytest.fixture
def bob_client(bob: Any) -> APIClient:
    return _client_for(bob)


def job_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "feature": "email-classify",
        "model": "claude-sonnet-4-6",
        "messages": [{"role": "user", "content": "Classify: please refund my order"}],
        "max_tokens": 256,
    }
    body.update(overrides)
    return body


class Workers:
    """Drives real RQ workers on a queue, in burst mode, fast-forwarding scheduled retries."""

    def __init__(self, queue_name: str = "llm") -> None:
        self.queue = django_rq.get_queue(queue_name)
        if queue_name == "llm":
            # As the project's worker class does at start (runtime/workers.py): the SDK is
            # loaded once, before any job, so that a test's first job is timed like any other.
            from providers.registry import warm_up_providers

            warm_up_providers()

    def work_once(self) -> None:
        worker = SimpleWorker([self.queue], connection=self.queue.connection)
        worker.work(burst=True)

    def scheduled(self) -> list[Job]:
        registry = self.queue.scheduled_job_registry
        return [Job.fetch(i, connection=self.queue.connection) for i in registry.get_job_ids()]

    def release_scheduled(self) -> int:
        """Move scheduled jobs onto the queue now: retries (their delays compressed by
        ``LLM_RETRY_DELAY_SCALE``) and holds alike, as the scheduler would once due.

        Not a retrying job whose row says it is not due yet (held for a paced slot of the rate
        limiter, in real seconds): released early it would be refused as not due, and its row
        would point at a spent RQ job. It stays scheduled until its row is due (``drain`` waits
        for it in real time)."""
        registry = self.queue.scheduled_job_registry
        released = 0
        for rq_job_id in registry.get_job_ids():
            job = Job.fetch(rq_job_id, connection=self.queue.connection)
            if self._not_due(job):
                continue
            registry.remove(rq_job_id)
            self.queue.enqueue_job(job)
            released += 1
        return released

    @staticmethod
    def _not_due(job: Job) -> bool:
        if job.func_name != RUN_LLM_JOB_TASK:
            return False
        due = timezone.now() + timedelta(seconds=DUE_TOLERANCE_SECONDS)
        return LlmJob.objects.filter(
            id=job.args[0], rq_job_id=job.id, status=LlmJob.Status.RETRYING, next_attempt_at__gt=due
        ).exists()

    def drain(self, *, max_rounds: int = 30, seconds: float = 60) -> None:
        """Run until nothing is left. Retries are fast-forwarded; a job the rate limiter holds
        waits for its paced slot in real time: after ``max_rounds`` quick rounds (or once only
        such holds are left), rounds go on a moment apart for up to ``seconds``."""
        deadline = time.monotonic() + seconds
        rounds = 0
        while True:
            self.work_once()
            released = self.release_scheduled()
            if not released and not self.queue.count:
                if not self.queue.scheduled_job_registry.count:
                    return
                rounds = max_rounds  # only holds not due yet: wait for them in real time
            rounds += 1
            if rounds >= max_rounds:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        raise AssertionError(f"{self.queue.name} jobs still pending after draining")


@pytest.fixture
def workers(fake_provider: FakeProvider) -> Workers:
    return Workers()


def submit(client: APIClient, **overrides: Any) -> LlmJob:
    response = client.post("/api/v1/jobs/", job_body(**overrides), format="json")
    assert response.status_code == 202, response.content
    return LlmJob.objects.get(id=response.json()["id"])


def procfile_command(name: str, *, port: int | None = None) -> list[str]:
    """The Procfile's line ``name`` as honcho runs it (an argument list); its ``--port`` becomes
    ``port``."""
    for line in (ROOT / "Procfile").read_text().splitlines():
        key, _, command = line.partition(":")
        if key.strip() == name:
            args = shlex.split(command)
            if port is not None:
                args[args.index("--port") + 1] = str(port)
            return args
    raise LookupError(f"the Procfile has no {name} line")


@contextmanager
def web_server(*, workers: int, log: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """The web server as the Procfile starts it (llmops/web.py under the respawn wrapper: HTTP and
    WebSocket on one port) in ``workers`` worker processes, on the test database, the
    environment as it is now (plus ``env``) and a free port; its output goes to ``log``. Yields
    its http:// base URL."""
    from django.db import connection

    from llmops.env import database_url

    if connection.vendor == "sqlite":
        pytest.skip("the server subprocess needs a database server, not an in-memory SQLite")
    env = {**os.environ, **(env or {})}
    env["DATABASE_URL"] = database_url(connection.settings_dict)
    env["WEB_CONCURRENCY"] = str(workers)
    # honcho runs the Procfile with the virtualenv's bin first on PATH.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        server = subprocess.Popen(
            procfile_command("web", port=port), cwd=ROOT, env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 60
        # One client for the whole wait: each new one loads the CA bundle, 0.1 to 0.5 s of CPU.
        with httpx.Client(timeout=2) as probe:
            while True:
                try:
                    if probe.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the web server did not start: {log.read_text()[-3000:]}")
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=40)


@pytest.fixture
def asgi_server(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """The web server as the Procfile starts it, here in two worker processes, on the test
    database (transactional: it sees what the test commits): live_server is WSGI and has no
    WebSocket. Yields its http:// base URL."""
    with web_server(workers=2, log=tmp_path / "asgi_server.log") as url:
        yield url
