"""The time to accept a 10,000-item batch: POST /api/v1/batches/ on the Procfile's web line.

    make bench-batch
    BENCH_BATCH_ITEMS=10000 BENCH_BATCH_RUNS=3 make bench-batch

The server is the Procfile's web line (under the respawn wrapper, WEB_CONCURRENCY worker
processes) on a free port, on its own MariaDB database (BENCH_BATCH_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_batch, recreated) and Redis index 1
(BENCH_BATCH_REDIS_URL, flushed). No worker runs: what is timed is the request alone, from the
first byte sent to its 202: parse, validate every item by the job rules, insert the batch, its
jobs and its items in one transaction, count them, and push the RQ jobs after commit. Each of
BENCH_BATCH_RUNS (3) runs posts a batch of BENCH_BATCH_ITEMS (10,000) distinct items, then one
of the same size in which each request appears twice (half the jobs), then reads the first
batch back (GET, which sums its jobs' cost). Every run checks the rows and the RQ jobs it made.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stack import Stack, machine, recreate_database  # noqa: E402

ITEMS = int(os.environ.get("BENCH_BATCH_ITEMS", "10000"))
RUNS = int(os.environ.get("BENCH_BATCH_RUNS", "3"))
DATABASE_URL = os.environ.get(
    "BENCH_BATCH_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_batch"
)
REDIS_URL = os.environ.get("BENCH_BATCH_REDIS_URL", "redis://127.0.0.1:6379/1")


def body(run: int, *, repeated: bool) -> dict[str, Any]:
    distinct = ITEMS // 2 if repeated else ITEMS
    items = [
        {
            "messages": [
                {
                    "role": "user",
                    "content": f"Run {run}, ticket {i % distinct}: summarise in one line. "
                    "The customer writes that the parcel arrived late and the box was damaged, "
                    "and asks whether a partial refund is possible.",
                }
            ],
            "max_tokens": 128,
            "metadata": {"ticket": i % distinct},
        }
        for i in range(ITEMS)
    ]
    return {
        "name": f"bench run {run}{' repeated' if repeated else ''}",
        "feature": "bench-batch",
        "model": "claude-haiku-4-5",
        "items": items,
    }


def post(http: httpx.Client, payload: dict[str, Any]) -> tuple[float, int, dict[str, Any]]:
    content = httpx.Request("POST", "/", json=payload).content  # encoded outside the timing
    started = time.perf_counter()
    response = http.post(
        "/api/v1/batches/", content=content, headers={"Content-Type": "application/json"}
    )
    seconds = time.perf_counter() - started
    if response.status_code != 202:
        raise RuntimeError(f"{response.status_code}: {response.text[:500]}")
    return seconds, len(content), response.json()


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

    from batches.models import Batch, BatchItem
    from jobs.models import LlmJob
    from keys.testing import api_key_for
    from llmops.queues import LLM_QUEUE

    queue = django_rq.get_queue(LLM_QUEUE)
    queue.connection.flushdb()
    user = get_user_model().objects.create_user("bench-batch")
    token = api_key_for(user)

    with tempfile.TemporaryDirectory(prefix="bench-batch-") as logs:
        stack = Stack(env, Path(logs))
        try:
            base = stack.web()
            print(
                f"{machine()}; web: the Procfile's web line, WEB_CONCURRENCY="
                f"{settings.WEB_CONCURRENCY}; no worker running; {ITEMS} items per batch"
            )
            headers = {"Authorization": f"Token {token}"}
            timings: dict[str, list[float]] = {"distinct": [], "repeated": [], "get": []}
            with httpx.Client(base_url=base, headers=headers, timeout=600) as http:
                # Warm-up: every web process has loaded the views, the prices and the queue.
                small = body(0, repeated=False)
                small["items"] = small["items"][:10]
                for _ in range(settings.WEB_CONCURRENCY * 2):
                    post(http, small)
                for run in range(1, RUNS + 1):
                    for kind in ("distinct", "repeated"):
                        seconds, size, answer = post(http, body(run, repeated=kind == "repeated"))
                        batch = Batch.objects.get(id=answer["id"])
                        jobs = LlmJob.objects.filter(batch_items__batch=batch).distinct().count()
                        items = BatchItem.objects.filter(batch=batch).count()
                        expected_jobs = ITEMS // 2 if kind == "repeated" else ITEMS
                        assert (batch.total, items, jobs) == (ITEMS, ITEMS, expected_jobs)
                        timings[kind].append(seconds)
                        print(
                            f"  run {run} {kind:<8} {size / 1e6:5.1f} MB, {expected_jobs:5d} jobs: "
                            f"202 in {seconds:6.2f} s = {ITEMS / seconds:7.0f} items/s"
                        )
                        if kind == "distinct":
                            started = time.perf_counter()
                            shown = http.get(answer["status_url"])
                            timings["get"].append(time.perf_counter() - started)
                            assert shown.json()["total"] == ITEMS
            queued = queue.count
            in_database = LlmJob.objects.count()
            print(f"RQ jobs on the llm queue: {queued}, jobs in the database: {in_database}")
            assert queued == in_database
            for kind in ("distinct", "repeated"):
                print(
                    f"{kind}: median {statistics.median(timings[kind]):.2f} s "
                    f"(best {min(timings[kind]):.2f} s) to accept {ITEMS} items"
                )
            print(
                f"GET /api/v1/batches/<id>/ of a {ITEMS}-item batch: median "
                f"{statistics.median(timings['get']) * 1000:.0f} ms"
            )
        finally:
            stack.stop()
    print(
        "command: make bench-batch  (or: .venv/bin/python bench/batch_submit.py; "
        f"BENCH_BATCH_ITEMS={ITEMS} BENCH_BATCH_RUNS={RUNS} "
        f"WEB_CONCURRENCY={settings.WEB_CONCURRENCY})"
    )


if __name__ == "__main__":
    main()
