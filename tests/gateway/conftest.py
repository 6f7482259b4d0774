"""The real stack the front-door tests drive with the official SDKs: the web server as the
Procfile starts it (uvicorn, ASGI), a real llm worker (``manage.py rqworker llm``), the fake
provider over HTTP (its Messages and OpenAI-compatible APIs), MariaDB and Redis. The web server
and the worker serve one test after another on a pytest worker (``_SharedProcesses``); the
database and Redis are emptied between tests as for any other."""

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from jobs.models import LlmJob
from keys.testing import api_key_for
from llmops.queues import DEFAULT_QUEUE, LLM_QUEUE
from tests.conftest import FakeProvider, make_user, web_server
from tests.embeddings.conftest import local_openai  # noqa: F401  (fixture)
from tests.jobs.test_takeover import Processes, wait_for, worker_env

__all__ = ["Stack", "billed_for", "billed_usd", "local_openai", "wait_for"]


@dataclass
class Stack:
    url: str
    fake: FakeProvider
    processes: Processes
    secret: str
    """An API key of ``user`` with every scope."""
    user: Any
    web_log: Path
    shared: Processes
    """The web server's and the llm worker's (``processes`` holds the test's own)."""
    with_batches: Callable[[], None]
    """Start the deferred loop and a default worker beside them (once: they are shared too)."""

    def anthropic(self, **options: Any) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=f"{self.url}/anthropic",
            api_key=options.pop("api_key", self.secret),
            max_retries=options.pop("max_retries", 0),
            **options,
        )

    def openai(self, **options: Any) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.url}/openai/v1",
            api_key=options.pop("api_key", self.secret),
            max_retries=options.pop("max_retries", 0),
            **options,
        )

    def job_api(self, job_id: str) -> dict[str, Any]:
        """``GET /api/v1/jobs/<id>/`` as the job's owner sees it."""
        response = httpx.get(
            f"{self.url}/api/v1/jobs/{job_id}/",
            headers={"Authorization": f"Bearer {self.secret}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def job(self, job_id: str) -> LlmJob:
        return LlmJob.objects.get(id=job_id)

    def job_or_none(self, status: str) -> LlmJob | None:
        """The one job of the test, if it has ``status``."""
        return LlmJob.objects.filter(status=status).first()

    def logs(self) -> str:
        """The tail of every process's output, for an assertion message."""
        web = self.web_log.read_text(errors="replace")[-3000:] if self.web_log.exists() else ""
        return f"{self.shared.logs()}\n{self.processes.logs()}\n--- web ---\n{web}"


def billed_for(fake: FakeProvider, job_id: str) -> list[dict[str, Any]]:
    """The fake provider's own bill of a job's calls (our workers send the job id as their
    ``Idempotency-Key``)."""
    calls = fake.http.get("/_fake/billing").json()["calls"]
    return [call for call in calls if call["idempotency_key"] == str(job_id)]


def billed_usd(fake: FakeProvider, job_id: str) -> Decimal:
    """What the provider billed a job's calls, each to the micro-dollar as the ledger books an
    attempt (ledger/pricing.py, half up)."""
    return sum(
        (
            Decimal(call["cost_usd"]).quantize(Decimal("1e-6"), rounding=ROUND_HALF_UP)
            for call in billed_for(fake, job_id)
        ),
        Decimal(0),
    )


_STACK_SETTINGS = {
    "LLM_RETRY_DELAY_SCALE": "0.001",
    "LLM_RATE_LIMIT_ENABLED": "False",
    "LLM_BREAKER_ENABLED": "False",
    "LLM_HEARTBEAT_SECONDS": "1",
}
"""Fast retries and no rate limiter or breaker in the way (each has tests of its own)."""
_BATCH_SETTINGS = {
    "LLM_DEFERRED_FLUSH_SECONDS": "0",
    "LLM_DEFERRED_POLL_SECONDS": "0.2",
    "LLM_DEFERRED_FALLBACK_MARGIN_SECONDS": "0",
    "LLM_RETRY_DELAY_SCALE": "0.001",
}
"""The deferred loop's: a batch sent at once, polled five times a second, no extra margin."""


class _SharedProcesses:
    """The web server and the llm worker of the package's tests on this pytest worker, started
    by the first test that needs them and kept for the next one: starting them (two Django
    processes and the SDK's import, about 3 s of CPU) was most of each test's cost. Stopped,
    to start afresh for the next test, when a test leaves anything in flight (a job not final,
    a call the provider still serves) or one of them has exited, and when the package's tests
    on this worker are done (no other test may find an llm worker on its Redis index)."""

    def __init__(self, log_dir: Path, fake: FakeProvider) -> None:
        self.log_dir = log_dir
        self.fake = fake
        self.processes: Processes | None = None
        self.web: ExitStack | None = None
        self.url = ""
        self.web_log = log_dir / "web.log"
        self.starts = 0
        self.batches = False

    def ensure_running(self) -> None:
        alive = self.processes is not None and all(
            process.poll() is None for process, _ in self.processes.started
        )
        if alive and self.web is not None:
            return
        self.stop()
        self.starts += 1
        folder = self.log_dir / f"start-{self.starts}"
        folder.mkdir()
        env = worker_env(self.fake, **_STACK_SETTINGS)
        self.processes = Processes(folder)
        self.processes.start(env, "rqworker", LLM_QUEUE, "--with-scheduler")
        self.batches = False
        self.web_log = folder / "web.log"
        self.web = ExitStack()
        # The web's count_tokens asks the fake provider too.
        self.url = self.web.enter_context(
            web_server(workers=1, log=self.web_log, env={"ANTHROPIC_BASE_URL": self.fake.url})
        )

    def ensure_batches(self) -> None:
        """The deferred loop at short timings (a batch sent at once, polled five times a second,
        no extra margin before a deadline) and a default worker (a cancel's background job),
        beside the running web server and llm worker."""
        self.ensure_running()
        if self.batches:
            return
        assert self.processes is not None
        env = worker_env(self.fake, **_BATCH_SETTINGS)
        self.processes.start(env, "deferred_batches", "--loop")
        loop_log = self.processes.started[-1][1]
        self.processes.start(env, "rqworker", DEFAULT_QUEUE)
        # A test whose deadline leaves the loop a few seconds to send a batch must not spend
        # them on the loop's start-up (a CI run under load sent nothing before the request's
        # fallback line).
        wait_for(
            lambda: "loop started" in loop_log.read_text(errors="replace"),
            timeout=60,
            what="the deferred loop to start",
        )
        self.batches = True

    def settle(self) -> None:
        """After a test: keep the processes for the next one only if nothing of this test is
        still running in them."""
        if self.processes is None:
            return

        def quiet() -> bool:
            return not (
                LlmJob.objects.exclude(status__in=LlmJob.FINAL_STATUSES).exists()
                or self.fake.http.get("/_fake/in_flight").json()["keys"]
            )

        try:
            wait_for(quiet, timeout=3, what="the test's jobs and calls to end", every=0.2)
        except AssertionError:
            self.stop()

    def stop(self) -> None:
        if self.web is not None:
            self.web.close()
            self.web = None
        if self.processes is not None:
            self.processes.stop_all()
            self.processes = None


@pytest.fixture(scope="package")
def _shared(
    django_db_setup: None,
    fake_provider_process: FakeProvider,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[_SharedProcesses]:
    shared = _SharedProcesses(tmp_path_factory.mktemp("gateway"), fake_provider_process)
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """A test's own extra processes (the deferred loop, a default worker), stopped at its end."""
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def stack(
    transactional_db: None,
    prices: None,
    fake_provider: FakeProvider,
    _shared: _SharedProcesses,
    processes: Processes,
) -> Iterator[Stack]:
    """The web server and one llm worker (shared with the package's next test on this pytest
    worker, see _SharedProcesses), with fast retries and no rate limiter or breaker in the way
    (each has tests of its own), and a user with a key."""
    _shared.ensure_running()
    assert _shared.processes is not None
    user = make_user("alice")
    secret = api_key_for(user)
    try:
        yield Stack(
            _shared.url,
            fake_provider,
            processes,
            secret,
            user,
            _shared.web_log,
            _shared.processes,
            _shared.ensure_batches,
        )
    finally:
        _shared.settle()
