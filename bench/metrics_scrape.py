"""A scrape of /metrics after 100,000 jobs, next to prometheus_client's multiprocess mode.

    make bench-metrics                         # 100,000 jobs, 2,000 of them through real workers
    BENCH_METRICS_JOBS=20000 BENCH_METRICS_REAL_JOBS=500 make bench-metrics

Uses its own MariaDB database (BENCH_METRICS_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_metrics, recreated) and Redis index 9 (flushed).

1. BENCH_METRICS_REAL_JOBS jobs run through 4 real `manage.py rqworker llm` processes (rq's
   forking worker: one work horse per job) against the fake provider, 429s included: the
   counters are kept by the work horses' own transactions. The scrape is timed, and the
   counters are compared with the ledger (`llm_metrics --check`).
2. The rest, up to BENCH_METRICS_JOBS, is loaded straight into the ledger (bulk inserts of jobs
   and attempt rows), counted by `llm_metrics --rebuild`, checked again, and the scrape is timed.
3. For comparison, prometheus_client's multiprocess mode (one file per work horse, the usual way
   to count in forked workers) is timed on 1,000 and 10,000 such files of the same metrics.

Prints the median and worst of 20 scrapes at each point, the counter rows a scrape reads, and
the size of the exposition.
"""

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

JOBS = int(os.environ.get("BENCH_METRICS_JOBS", "100000"))
REAL_JOBS = int(os.environ.get("BENCH_METRICS_REAL_JOBS", "2000"))
WORKERS = 4
SCRAPES = 20
DATABASE_URL = os.environ.get(
    "BENCH_METRICS_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_metrics"
)
REDIS_URL = os.environ.get("BENCH_METRICS_REDIS_URL", "redis://127.0.0.1:6379/9")
TOKEN = "bench-metrics-token"
FEATURES = ["summarize", "classify", "extract", "translate", "chat", "moderate"]
MODELS = ["claude-haiku-4-5", "claude-sonnet-4-6", "claude-opus-4-1"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def time_scrapes(label: str) -> None:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from metrics.models import AttemptCounter, FailureCounter, JobCounter

    client = Client()
    times = []
    size = 0
    for _ in range(SCRAPES):
        started = time.perf_counter()
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.status_code
        size = len(response.content)
    with CaptureQueriesContext(connection) as queries:
        client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    rows = AttemptCounter.objects.count() + JobCounter.objects.count()
    rows += FailureCounter.objects.count()
    print(
        f"{label}: scrape median {statistics.median(times) * 1000:.1f} ms, "
        f"worst {max(times) * 1000:.1f} ms ({SCRAPES} scrapes; {len(queries)} SQL queries, "
        f"{rows} counter rows, {size / 1024:.1f} KiB)"
    )


def check(label: str) -> None:
    from metrics.selectors import counter_totals, ledger_totals

    differences = counter_totals().differences(ledger_totals())
    verdict = "equal" if not differences else f"{len(differences)} DIFFERENT: {differences[:3]}"
    print(f"{label}: counters vs ledger: {verdict}")


def run_real_jobs(env: dict[str, str], port: int) -> None:
    import httpx
    from django.contrib.auth import get_user_model

    from jobs.services import job_submit
    from llmops.queues import LLM_QUEUE

    py = sys.executable
    fake = subprocess.Popen(
        [py, "manage.py", "fake_anthropic", "--port", str(port), "--latency-ms", "0"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/_fake/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        httpx.post(f"http://127.0.0.1:{port}/_fake/faults", json={"faults": {"429": 0.1}})
        user = get_user_model().objects.create_user("bench-real")
        for i in range(REAL_JOBS):
            job_submit(
                user=user,
                data={
                    "feature": FEATURES[i % len(FEATURES)],
                    "model": MODELS[i % len(MODELS)],
                    "messages": [{"role": "user", "content": f"Classify ticket {i}: refund"}],
                    "max_tokens": 128,
                },
            )
        started = time.perf_counter()
        workers = [
            subprocess.Popen(
                [py, "manage.py", "rqworker", LLM_QUEUE, "--burst", "--with-scheduler"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for _ in range(WORKERS)
        ]
        for worker in workers:
            worker.wait()
        # Retries scheduled past the burst: run them now (delays are scaled to milliseconds).
        from jobs.models import LlmJob

        while LlmJob.objects.exclude(status__in=LlmJob.FINAL_STATUSES).exists():
            subprocess.run(
                [py, "manage.py", "rqworker", LLM_QUEUE, "--burst", "--with-scheduler"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(0.5)
        print(
            f"phase 1: {REAL_JOBS} jobs through {WORKERS} forking rqworker processes "
            f"(one work horse per job) in {time.perf_counter() - started:.1f} s"
        )
    finally:
        fake.terminate()
        fake.wait()


def load_ledger(count: int) -> None:
    """Jobs and their attempt rows, inserted in bulk (the ledger a long-running system has)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from jobs.models import LlmJob
    from ledger.models import CostEntry

    user = get_user_model().objects.create_user("bench-loaded")
    rng = random.Random(7)
    now = timezone.now()
    batch = 5000
    outcomes = [("success", "", 200)] * 17 + [("error_response", "rate_limited", 429)] * 2
    outcomes += [("error_response", "overloaded", 529)]
    for start in range(0, count, batch):
        jobs, entries = [], []
        for i in range(start, min(count, start + batch)):
            feature, model = FEATURES[i % len(FEATURES)], MODELS[i % len(MODELS)]
            at = now - timedelta(minutes=rng.randrange(60 * 24 * 30))
            job = LlmJob(
                id=uuid.uuid4(), user=user, feature=feature, model=model, status="completed",
                messages=[{"role": "user", "content": "x"}], max_tokens=128, attempts=1,
                request_fingerprint="0" * 64, cost_usd=Decimal("0.0012"),
                enqueued_at=at, started_at=at, completed_at=at,
            )  # fmt: skip
            jobs.append(job)
            outcome, reason, status = rng.choice(outcomes)
            success = outcome == "success"
            entries.append(
                CostEntry(
                    job=job,
                    attempt=1,
                    feature=feature,
                    model=model,
                    user=user,
                    outcome=outcome,
                    reason_code=reason,
                    http_status=status,
                    input_tokens=rng.randrange(50, 2000) if success else 0,
                    output_tokens=rng.randrange(10, 500) if success else 0,
                    cost_usd=Decimal("0.0012") if success else Decimal(0),
                    latency_ms=rng.randrange(200, 20000),
                )  # fmt: skip
            )
        LlmJob.objects.bulk_create(jobs)
        CostEntry.objects.bulk_create(entries)


def multiprocess_baseline(files: int) -> float:
    """Seconds to collect prometheus_client's multiprocess directory of ``files`` work horses."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.mmap_dict import MmapedDict, mmap_key
    from prometheus_client.multiprocess import MultiProcessCollector

    with tempfile.TemporaryDirectory() as directory:
        for pid in range(files):
            values = MmapedDict(os.path.join(directory, f"counter_{pid}.db"))
            for feature in FEATURES[:2]:
                for outcome in ("success", "rate_limited"):
                    key = mmap_key(
                        "llm_attempts_total", "llm_attempts_total",
                        ["feature", "model", "outcome"], [feature, MODELS[0], outcome], "",
                    )  # fmt: skip
                    values.write_value(key, 1.0, 0.0)
            values.close()
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        started = time.perf_counter()
        generate_latest(registry)
        return time.perf_counter() - started


def main() -> None:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
        "METRICS_TOKEN": TOKEN,
        "LLM_RETRY_DELAY_SCALE": "0.001",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    os.environ.update(env)
    name = DATABASE_URL.rsplit("/", 1)[-1]
    subprocess.run(
        ["mysql", "-h127.0.0.1", "-uroot", "-e",
         f"DROP DATABASE IF EXISTS `{name}`; CREATE DATABASE `{name}` CHARACTER SET utf8mb4"],
        check=True,
    )  # fmt: skip
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)

    import django

    django.setup()
    from django.conf import settings

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    import django_rq

    from jobs.models import LlmJob
    from llmops.queues import LLM_QUEUE
    from metrics.rebuild import metrics_rebuild

    django_rq.get_connection(LLM_QUEUE).flushdb()
    time_scrapes("empty system")
    run_real_jobs(env, port)
    check("after phase 1")
    time_scrapes(f"after {LlmJob.objects.count()} jobs")
    started = time.perf_counter()
    load_ledger(max(0, JOBS - REAL_JOBS))
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    metrics_rebuild()
    print(
        f"phase 2: {max(0, JOBS - REAL_JOBS)} jobs loaded into the ledger in {loaded:.1f} s, "
        f"counted by llm_metrics --rebuild in {time.perf_counter() - started:.1f} s"
    )
    check("after phase 2")
    time_scrapes(f"after {LlmJob.objects.count()} jobs")
    for files in (1000, 10000):
        seconds = multiprocess_baseline(files)
        print(
            f"prometheus_client multiprocess mode, {files} work-horse files: "
            f"one collect {seconds * 1000:.0f} ms"
        )
    print(f"command: BENCH_METRICS_JOBS={JOBS} BENCH_METRICS_REAL_JOBS={REAL_JOBS} "
          "make bench-metrics")  # fmt: skip


if __name__ == "__main__":
    main()
