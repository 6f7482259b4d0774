"""Helpers for the rate-limit tests: the limiter's own calls against the real Redis, with a
window compressed from 60 s to a few seconds (LLM_RATE_LIMIT_WINDOW_SECONDS), and real
`manage.py rqworker llm` processes against the fake provider."""

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratelimits.limiter import (
    Verdict,
    limiter_reserve,
    limiter_settle,
    redis_client,
    reserve_call,
    reserve_script,
    verdict_of,
)
from tests.conftest import FakeProvider
from tests.jobs.test_takeover import Processes, worker_env

PROVIDER, MODEL = "anthropic", "claude-sonnet-4-6"
_ids = itertools.count()


@pytest.fixture(autouse=True)
def compressed_window(settings: Any) -> None:
    settings.LLM_RATE_LIMIT_WINDOW_SECONDS = 2.0
    settings.LLM_RATE_LIMIT_MARGIN_SECONDS = 0.0
    settings.LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS = 0.0
    settings.LLM_RATE_LIMIT_SLOW_START = False  # the tests that pace say so
    settings.LLM_FEATURE_WEIGHTS = {}
    settings.LLM_PRIORITY_FEATURES = frozenset()
    settings.LLM_USER_FAIR_SHARE = True
    settings.LLM_USER_MAX_SHARE = 1.0


def reserve(
    *,
    rpm: int | None = None,
    input_tpm: int | None = None,
    output_tpm: int | None = None,
    feature: str = "summarize",
    user: str = "1",
    job: str | None = None,
    input_tokens: int = 10,
    output_tokens: int = 10,
    weights: dict[str, float] | None = None,
    max_wait_ms: int = 0,
    model: str = MODEL,
) -> tuple[Verdict, str]:
    """One reservation attempt; returns the verdict and the reservation id."""
    job = job or uuid.uuid4().hex
    reservation = f"{job}:{next(_ids)}"
    verdict = limiter_reserve(
        provider=PROVIDER,
        model=model,
        reservation_id=reservation,
        job_id=job,
        feature=feature,
        user=user,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        rpm=rpm,
        input_tpm=input_tpm,
        output_tpm=output_tpm,
        weights=weights or {},
        max_wait_ms=max_wait_ms,
    )
    return verdict, reservation


def reserve_together(*, rpm: int, waits: list[int], jobs: list[str] | None = None) -> list[Verdict]:
    """One reservation per entry of ``waits`` (its ``max_wait_ms``; for the job of the same place
    in ``jobs``, a new one if none), sent in one MULTI/EXEC: Redis runs them back to back on one
    clock reading's worth of time, so no paced slot comes due between them however slowly this
    process is scheduled, and their ``ms`` are measured from the same instant."""
    pipe = redis_client().pipeline(transaction=True)
    for i, max_wait_ms in enumerate(waits):
        job = jobs[i] if jobs else uuid.uuid4().hex
        keys, args = reserve_call(
            provider=PROVIDER,
            model=MODEL,
            reservation_id=f"{job}:{next(_ids)}",
            job_id=job,
            feature="summarize",
            user="1",
            input_tokens=10,
            output_tokens=10,
            rpm=rpm,
            input_tpm=None,
            output_tpm=None,
            weights={},
            max_wait_ms=max_wait_ms,
        )
        reserve_script()(keys=keys, args=args, client=pipe)
    return [verdict_of(answer) for answer in pipe.execute()]


def admitted_at_once(verdicts: list[Verdict]) -> int:
    """How many of the verdicts were admitted before the first refusal."""
    admitted = 0
    while admitted < len(verdicts) and verdicts[admitted].admitted:
        admitted += 1
    assert admitted < len(verdicts), "every try was admitted: the burst is larger than expected"
    return admitted


def burst_at_once(*, rpm: int, tries: int = 12) -> int:
    """How many calls the limiter admits at once right now (``reserve_together``)."""
    return admitted_at_once(reserve_together(rpm=rpm, waits=[0] * tries))


def settle(reservation: str, **kwargs: Any) -> None:
    limiter_settle(provider=PROVIDER, model=MODEL, reservation_id=reservation, **kwargs)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def llm_worker_env(fake_provider: FakeProvider, **extra: str) -> dict[str, str]:
    """A worker's environment: the test database and Redis, the fake provider, the compressed
    window, and a few threads per process (many threads and many processes at once)."""
    env = worker_env(
        fake_provider,
        LLM_RATE_LIMIT_WINDOW_SECONDS="3",
        LLM_RATE_LIMIT_MARGIN_SECONDS="0.1",
        LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS="0",
        LLM_RETRY_DELAY_SCALE="0.001",
        LLM_HEARTBEAT_SECONDS="1",
        LLM_WORKER_CONCURRENCY="4",
        LOG_LEVEL="INFO",
    )
    env.update(extra)
    return env
