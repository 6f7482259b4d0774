"""The real stack the front-door tests drive with the official SDKs: the web server as the
Procfile starts it (uvicorn, ASGI), a real llm worker (``manage.py rqworker llm``), the fake
provider over HTTP (its Messages and OpenAI-compatible APIs), MariaDB and Redis."""

from collections.abc import Iterator
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
from llmops.queues import LLM_QUEUE
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
        return f"{self.processes.logs()}\n--- web ---\n{web}"


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


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
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
    processes: Processes,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Stack]:
    """The web server and one llm worker, with fast retries and no rate limiter or breaker in the
    way (each has tests of its own), and a user with a key."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_provider.url)  # the web's count_tokens
    env = worker_env(
        fake_provider,
        LLM_RETRY_DELAY_SCALE="0.001",
        LLM_RATE_LIMIT_ENABLED="False",
        LLM_BREAKER_ENABLED="False",
        LLM_HEARTBEAT_SECONDS="1",
    )
    processes.start(env, "rqworker", LLM_QUEUE, "--with-scheduler")
    user = make_user("alice")
    secret = api_key_for(user)
    web_log = tmp_path / "web.log"
    with web_server(workers=1, log=web_log) as url:
        yield Stack(url, fake_provider, processes, secret, user, web_log)
