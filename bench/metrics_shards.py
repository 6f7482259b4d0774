"""Do the sharded counter rows earn their cost? Counting transactions with 1 shard and with 8.

    .venv/bin/python bench/metrics_shards.py
    BENCH_SHARDS_THREADS=8,32 BENCH_SHARDS_SECONDS=5 .venv/bin/python bench/metrics_shards.py

Each thread (its own database connection, as a threaded llm worker's job threads have) runs
transactions shaped like an attempt's end: one row inserted (the ledger row), the attempt
counted (``count_cost_entry``) and the job's new status counted (``count_job_status``), commit.
Every transaction counts the same label set (one feature, one model, one outcome): the worst
case, every worker finishing jobs of one feature. For each number of threads, with
``SHARDS`` = 1 (one row per label set) and 8 (the shipped value), it prints transactions per
second, the median and 99th percentile of a transaction's duration, and the deadlocks seen.

Uses its own MariaDB database (BENCH_SHARDS_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_shards, recreated); no Redis.
"""

import os
import statistics
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATABASE_URL = os.environ.get(
    "BENCH_SHARDS_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_shards"
)
THREADS = [int(n) for n in os.environ.get("BENCH_SHARDS_THREADS", "1,8,16,32").split(",")]
SECONDS = float(os.environ.get("BENCH_SHARDS_SECONDS", "8"))


def setup() -> None:
    import subprocess

    name = DATABASE_URL.rsplit("/", 1)[1]
    subprocess.run(
        ["mysql", "-uroot", "-h127.0.0.1", "-e", f"DROP DATABASE IF EXISTS {name}; "
         f"CREATE DATABASE {name}"],
        check=True,
    )  # fmt: skip
    os.environ["DATABASE_URL"] = DATABASE_URL
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmops.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE bench_ledger (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload "
            "VARCHAR(200) NOT NULL) ENGINE=InnoDB"
        )


def run(threads: int, shards: int) -> str:
    from django.db import OperationalError, connection, transaction

    import metrics.counters as counters
    from metrics.models import AttemptCounter, JobCounter

    counters.SHARDS = shards  # what _shard() reads
    entry = SimpleNamespace(
        entry_type="attempt", feature="summarize", model="claude-sonnet-4-6",
        outcome="success", reason_code="", cost_usd=Decimal("0.004215"), latency_ms=2300,
        input_tokens=900, output_tokens=150, cache_write_5m_tokens=0, cache_write_1h_tokens=0,
        cache_read_tokens=0,
    )  # fmt: skip
    job = SimpleNamespace(feature="summarize", model="claude-sonnet-4-6", status="completed")
    durations: list[float] = []
    deadlocks = 0
    lock = threading.Lock()
    start = threading.Barrier(threads)
    stop_at = [0.0]

    def work() -> None:
        nonlocal deadlocks
        mine: list[float] = []
        lost = 0
        start.wait()
        while time.monotonic() < stop_at[0]:
            began = time.perf_counter()
            try:
                with transaction.atomic():
                    with connection.cursor() as cursor:
                        cursor.execute(
                            "INSERT INTO bench_ledger (payload) VALUES (%s)", ["x" * 120]
                        )
                    counters.count_cost_entry(entry)  # type: ignore[arg-type]
                    counters.count_job_status(job)  # type: ignore[arg-type]
            except OperationalError:
                lost += 1
                continue
            mine.append(time.perf_counter() - began)
        connection.close()
        with lock:
            durations.extend(mine)
            deadlocks += lost

    AttemptCounter.objects.all().delete()
    JobCounter.objects.all().delete()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    stop_at[0] = time.monotonic() + SECONDS + 0.5
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    counted = sum(JobCounter.objects.values_list("jobs", flat=True))
    assert counted == len(durations), (counted, len(durations))
    durations.sort()
    p99 = durations[int(len(durations) * 0.99) - 1]
    return (
        f"{threads:>7} {shards:>6} {len(durations) / SECONDS:>8.0f} "
        f"{statistics.median(durations) * 1000:>9.1f} {p99 * 1000:>8.1f} {deadlocks:>9}"
    )


def main() -> None:
    setup()
    print(f"{SECONDS:g} s per point, one label set, innodb_flush_log_at_trx_commit as configured")
    print("threads shards   txn/s  median_ms   p99_ms deadlocks")
    for threads in THREADS:
        for shards in (1, 8):
            print(run(threads, shards), flush=True)


if __name__ == "__main__":
    main()
