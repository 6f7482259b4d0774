"""Submit under concurrency: POST /api/v1/jobs/ next to a bare authenticated DRF endpoint
(GET /api/v1/me/) on the same server in the same run, with the provider at each latency.

    make bench-submit     # 32 clients, 2,000 requests per phase, the provider at 0 s and at 10 s
    BENCH_SUBMIT_CLIENTS=64 WEB_CONCURRENCY=3 make bench-submit

The server is the Procfile's web line (under the respawn wrapper, WEB_CONCURRENCY worker
processes) on a free port, with BENCH_SUBMIT_LLM_WORKERS (2) copies of the Procfile's worker_llm
line running the jobs against the fake provider: its own MariaDB database
(BENCH_SUBMIT_DATABASE_URL, default mysql://root@127.0.0.1:3306/llmops_bench_submit, recreated)
and Redis index 10 (BENCH_SUBMIT_REDIS_URL, flushed). BENCH_SUBMIT_CLIENTS clients (httpx, async,
one keep-alive connection each) share BENCH_SUBMIT_REQUESTS requests per phase. For each provider
latency in BENCH_SUBMIT_LATENCIES_MS ("0,10000"), the queue is drained first (a backlog is left
at 10 s), then the bare endpoint and submit are timed one after the other. With
BENCH_SUBMIT_ROUNDS=N (default 1) they take turns N times, each with a share of the requests, so
that a drift of the shared machine's speed during the run (seen: the bare endpoint alone from 133
to 196/s between identical runs) falls on both alike; each figure then sums its rounds. At 0 s
that also makes the bare endpoint share the cores with the workers running the jobs the last
submit round queued, which is why the default stays one round (the conservative figure).
Prints throughput and
p50/p99 latency of each, and submit's throughput as a fraction of the bare endpoint's (target:
at least 0.5). Client and server share the machine's cores.
"""

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stack import (  # noqa: E402
    Stack,
    machine,
    procfile_command,
    recreate_database,
    wait_for,
)

CLIENTS = int(os.environ.get("BENCH_SUBMIT_CLIENTS", "32"))
REQUESTS = int(os.environ.get("BENCH_SUBMIT_REQUESTS", "2000"))
ROUNDS = max(1, int(os.environ.get("BENCH_SUBMIT_ROUNDS", "1")))
LLM_WORKERS = int(os.environ.get("BENCH_SUBMIT_LLM_WORKERS", "2"))
LATENCIES_MS = [int(v) for v in os.environ.get("BENCH_SUBMIT_LATENCIES_MS", "0,10000").split(",")]
DATABASE_URL = os.environ.get(
    "BENCH_SUBMIT_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_submit"
)
REDIS_URL = os.environ.get("BENCH_SUBMIT_REDIS_URL", "redis://127.0.0.1:6379/10")
WARM_UP = 20
"""Requests per client and endpoint before timing: every web worker has served both."""


class Phase:
    def __init__(self, name: str, latencies: list[float], seconds: float, errors: int) -> None:
        self.name, self.latencies, self.seconds, self.errors = name, latencies, seconds, errors

    def __add__(self, other: "Phase") -> "Phase":
        return Phase(
            self.name or other.name,
            self.latencies + other.latencies,
            self.seconds + other.seconds,
            self.errors + other.errors,
        )

    @property
    def per_second(self) -> float:
        return len(self.latencies) / self.seconds

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000

    def line(self) -> str:
        errors = f", {self.errors} errors" if self.errors else ""
        return (
            f"  {self.name:<28} {len(self.latencies):5d} in {self.seconds:6.2f} s = "
            f"{self.per_second:7.1f}/s   p50 {self.percentile(0.5):6.1f} ms   "
            f"p99 {self.percentile(0.99):7.1f} ms{errors}"
        )


def job_body(i: int) -> dict[str, object]:
    return {
        "feature": f"bench-{i % 4}",
        "model": "claude-haiku-4-5",
        "messages": [{"role": "user", "content": f"Classify ticket {i}: please refund my order"}],
        "max_tokens": 128,
    }


async def run_phase(
    base: str, token: str, name: str, *, submit: bool, requests: int = REQUESTS
) -> Phase:
    latencies: list[float] = []
    errors = 0
    remaining = requests
    headers = {"Authorization": f"Token {token}"}

    async def client() -> None:
        nonlocal remaining, errors
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
            while remaining > 0:
                remaining -= 1
                i = remaining
                started = time.perf_counter()
                if submit:
                    response = await http.post("/api/v1/jobs/", json=job_body(i))
                    ok = response.status_code == 202
                else:
                    response = await http.get("/api/v1/me/")
                    ok = response.status_code == 200
                latencies.append(time.perf_counter() - started)
                errors += not ok

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return Phase(name, latencies, time.perf_counter() - started, errors)


def main() -> None:
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
    }
    recreate_database(DATABASE_URL)
    os.environ.update(env)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)

    import django

    django.setup()
    import django_rq
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from jobs.models import LlmJob
    from keys.testing import api_key_for
    from llmops.queues import LLM_QUEUE

    queue = django_rq.get_queue(LLM_QUEUE)
    queue.connection.flushdb()
    user = get_user_model().objects.create_user("bench-submit")
    token = api_key_for(user)

    with tempfile.TemporaryDirectory(prefix="bench-submit-") as logs:
        stack = Stack(env, Path(logs))
        try:
            provider = stack.fake_provider(latency_ms=0)
            stack.env["ANTHROPIC_BASE_URL"] = provider
            base = stack.web()
            for _ in range(LLM_WORKERS):
                stack.start(procfile_command("worker_llm"), "worker_llm")
            print(
                f"{machine()}; web: the Procfile's web line, WEB_CONCURRENCY="
                f"{settings.WEB_CONCURRENCY}; llm workers: {LLM_WORKERS} x "
                f"`{' '.join(procfile_command('worker_llm', respawn=False))}` "
                f"({settings.RQ['WORKER_CLASS']})"
            )
            print(
                f"{CLIENTS} concurrent clients, {REQUESTS} requests per endpoint and latency"
                + (f", in {ROUNDS} rounds taking turns" if ROUNDS > 1 else "")
            )
            asyncio.run(run_phase(base, token, "", submit=False, requests=WARM_UP * CLIENTS))
            asyncio.run(run_phase(base, token, "", submit=True, requests=WARM_UP * CLIENTS))
            for latency_ms in LATENCIES_MS:
                # Nothing left from the last phase competes for the cores.
                wait_for(
                    lambda: not LlmJob.objects.filter(
                        status__in=[LlmJob.Status.QUEUED, LlmJob.Status.RUNNING]
                    ).exists(),
                    timeout=600,
                    what="the queue to drain",
                )
                httpx.post(
                    f"{provider}/_fake/faults", json={"faults": {}, "latency_ms": latency_ms}
                ).raise_for_status()
                bare = jobs = Phase("", [], 0.0, 0)
                for round_ in range(ROUNDS):
                    share = REQUESTS // ROUNDS + (round_ < REQUESTS % ROUNDS)
                    bare += asyncio.run(
                        run_phase(base, token, "GET /api/v1/me/", submit=False, requests=share)
                    )
                    jobs += asyncio.run(
                        run_phase(base, token, "POST /api/v1/jobs/", submit=True, requests=share)
                    )
                print(f"provider latency {latency_ms / 1000:g} s:")
                print(bare.line())
                print(jobs.line())
                print(f"  submit / bare throughput: {jobs.per_second / bare.per_second:.2f}")
            submitted = LlmJob.objects.count()
            expected = (len(LATENCIES_MS) * REQUESTS) + WARM_UP * CLIENTS
            print(f"jobs in the database: {submitted} (expected {expected})")
        finally:
            stack.stop()
    print(
        "command: make bench-submit  (or: .venv/bin/python bench/submit.py; "
        f"BENCH_SUBMIT_CLIENTS={CLIENTS} BENCH_SUBMIT_REQUESTS={REQUESTS} "
        f"BENCH_SUBMIT_ROUNDS={ROUNDS} "
        f"BENCH_SUBMIT_LLM_WORKERS={LLM_WORKERS} WEB_CONCURRENCY={settings.WEB_CONCURRENCY})"
    )


if __name__ == "__main__":
    main()
