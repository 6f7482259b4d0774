"""End-to-end throughput: N jobs through real forking RQ workers and the fake provider.

    make bench                       # 500 jobs, 4 workers, 50 ms provider latency
    BENCH_JOBS=2000 BENCH_WORKERS=8 BENCH_LATENCY_MS=200 make bench

Uses its own MariaDB database (BENCH_DATABASE_URL, default mysql://root@127.0.0.1:3306/llmops_bench,
recreated) and Redis index 13 (flushed). Prints jobs/s, submit-to-complete latency percentiles and
whether the ledger matches what the provider billed, to the cent and to the token.
"""

import os
import socket
import statistics
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

JOBS = int(os.environ.get("BENCH_JOBS", "500"))
WORKERS = int(os.environ.get("BENCH_WORKERS", "4"))
LATENCY_MS = os.environ.get("BENCH_LATENCY_MS", "50")
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
    }
    os.environ.update(env)
    name = DATABASE_URL.rsplit("/", 1)[-1]
    subprocess.run(
        ["mysql", "-h127.0.0.1", "-uroot", "-e",
         f"DROP DATABASE IF EXISTS `{name}`; CREATE DATABASE `{name}` CHARACTER SET utf8mb4"],
        check=True,
    )  # fmt: skip
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)

    import django

    django.setup()
    import django_rq
    import httpx
    from django.contrib.auth import get_user_model
    from django.db.models import Sum

    from jobs.models import LlmJob
    from jobs.services import job_submit
    from ledger.models import CostEntry
    from llmops.queues import LLM_QUEUE

    django_rq.get_connection(LLM_QUEUE).flushdb()
    fake = subprocess.Popen(
        [py, "manage.py", "fake_anthropic", "--port", str(port), "--latency-ms", LATENCY_MS],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/_fake/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        user = get_user_model().objects.create_user("bench")
        started = time.perf_counter()
        for i in range(JOBS):
            job_submit(
                user=user,
                data={
                    "feature": f"bench-{i % 5}",
                    "model": "claude-haiku-4-5",
                    "messages": [{"role": "user", "content": f"Classify ticket {i}: refund"}],
                    "max_tokens": 128,
                },
            )
        submit_seconds = time.perf_counter() - started
        run_started = time.perf_counter()
        workers = [
            subprocess.Popen(
                [py, "manage.py", "rqworker", LLM_QUEUE, "--burst"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for _ in range(WORKERS)
        ]
        for w in workers:
            w.wait()
        run_seconds = time.perf_counter() - run_started
        completed = LlmJob.objects.filter(status="completed")
        waits = sorted(
            (j.completed_at - j.created_at).total_seconds()
            for j in completed.only("created_at", "completed_at")
        )
        ledger = CostEntry.objects.aggregate(
            cost=Sum("cost_usd"), inp=Sum("input_tokens"), out=Sum("output_tokens")
        )
        billed = httpx.get(f"http://127.0.0.1:{port}/_fake/stats").json()["billed"]
    finally:
        fake.terminate()
        fake.wait()

    def pct(p: float) -> float:
        return waits[min(len(waits) - 1, int(p * len(waits)))] if waits else float("nan")

    print(f"jobs: {JOBS}, workers: {WORKERS} (forking rqworker), provider latency: {LATENCY_MS} ms")
    print(f"submit (service, MariaDB): {JOBS / submit_seconds:.0f} jobs/s")
    print(f"run: {completed.count()} completed in {run_seconds:.2f} s = "
          f"{completed.count() / run_seconds:.1f} jobs/s")  # fmt: skip
    print(f"submit-to-complete: p50 {pct(0.5):.2f} s, p95 {pct(0.95):.2f} s, "
          f"mean {statistics.fmean(waits):.2f} s")  # fmt: skip
    same_cost = Decimal(billed["cost_usd"]) == ledger["cost"]
    same_tokens = (billed["input_tokens"], billed["output_tokens"]) == (
        ledger["inp"],
        ledger["out"],
    )
    print(f"ledger ${ledger['cost']} vs provider billed ${billed['cost_usd']}: "
          f"{'equal' if same_cost and same_tokens else 'DIFFERENT'}")  # fmt: skip


if __name__ == "__main__":
    main()
