"""The cost and the completion time of 10,000 deferred summaries against the same in real time:
the same distinct summary requests (claude-haiku-4-5, max_tokens 200) submitted twice through
the batch service, once ``"mode": "realtime"`` (run by the Procfile's llm workers against the
fake provider at BENCH_DEFERRED_LATENCY_MS), once ``"mode": "deferred"`` (sent by the Procfile's
``deferred`` process as provider message batches, which the fake ends over a simulated
``batch_processing_seconds``, then booked at the batch price).

    make bench-deferred                                    # 10,000 jobs, 2 workers
    BENCH_DEFERRED_JOBS=1000 BENCH_DEFERRED_PROCESSING_SECONDS=10 make bench-deferred

Uses its own MariaDB database (BENCH_DEFERRED_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_deferred, recreated) and Redis index 12
(BENCH_DEFERRED_REDIS_URL, flushed). Prints, per mode, the jobs completed, the wall time from
submit to the last completion, the ledger, the fake's bill and the cost per 1,000 jobs, then
the ratio of the costs; asserts nothing but completeness (every job completed, the ledger
within rounding of the bill: each ledger row rounds half-up to the micro-dollar).
BENCH_DEFERRED_LOG_DIR keeps the processes' logs there (default: a temporary directory).
"""

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stack import Stack, machine, procfile_command, recreate_database, wait_for  # noqa: E402

JOBS = int(os.environ.get("BENCH_DEFERRED_JOBS", "10000"))
WORKERS = int(os.environ.get("BENCH_DEFERRED_WORKERS", "2"))
LATENCY_MS = int(os.environ.get("BENCH_DEFERRED_LATENCY_MS", "500"))
PROCESSING_SECONDS = float(os.environ.get("BENCH_DEFERRED_PROCESSING_SECONDS", "30"))
FLUSH_SECONDS = os.environ.get("BENCH_DEFERRED_FLUSH_SECONDS", "5")
POLL_SECONDS = os.environ.get("BENCH_DEFERRED_POLL_SECONDS", "2")
DATABASE_URL = os.environ.get(
    "BENCH_DEFERRED_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_deferred"
)
REDIS_URL = os.environ.get("BENCH_DEFERRED_REDIS_URL", "redis://127.0.0.1:6379/12")
MODEL = "claude-haiku-4-5"
MAX_TOKENS = 200
HALF_MICRO = Decimal("0.0000005")


@dataclass
class Run:
    mode: str
    completed: int
    wall: float
    ledger: Decimal
    rows: int
    bill: Decimal
    notes: str = ""

    def per_1000(self) -> Decimal:
        return (self.bill * 1000 / self.completed).quantize(Decimal("0.0001"))


def main() -> None:
    import subprocess

    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
        "LLM_DEFERRED_FLUSH_SECONDS": FLUSH_SECONDS,
        "LLM_DEFERRED_POLL_SECONDS": POLL_SECONDS,
    }
    recreate_database(DATABASE_URL)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    with tempfile.TemporaryDirectory(prefix="bench-deferred-") as logs:
        stack = Stack(env, Path(os.environ.get("BENCH_DEFERRED_LOG_DIR") or logs))
        try:
            provider = stack.fake_provider(latency_ms=LATENCY_MS)
            env["ANTHROPIC_BASE_URL"] = stack.env["ANTHROPIC_BASE_URL"] = provider
            os.environ.update(env)
            import django

            django.setup()
            measure(stack, provider)
        finally:
            stack.stop()


def billed(provider: str) -> dict[str, Any]:
    import httpx

    return dict(httpx.get(f"{provider}/_fake/stats", timeout=30).json()["billed"])


def summaries() -> list[dict[str, Any]]:
    # Distinct documents of about 120 words; the fake answers about 120 output tokens each.
    words = "revenue grew while costs fell and the team shipped the new release on time".split()
    items = []
    for i in range(JOBS):
        body = " ".join(words[(i + k) % len(words)] for k in range(120))
        text = f"Summarise report {i} in three sentences (fake_output_tokens=120):\n{body}"
        items.append({"messages": [{"role": "user", "content": text}], "max_tokens": MAX_TOKENS})
    return items


def run(user: Any, mode: str, items: list[dict[str, Any]], provider: str) -> Run:
    from django.db.models import Max, Min, Sum
    from django.utils import timezone

    from batches.models import Batch
    from batches.services import batch_submit
    from deferred.models import ProviderBatch
    from jobs.models import LlmJob
    from ledger.models import CostEntry

    before = billed(provider)
    started = time.perf_counter()
    batch, _ = batch_submit(
        user=user,
        data={"feature": f"bench-{mode}", "model": MODEL, "mode": mode, "items": items},
    )
    submitted = time.perf_counter() - started
    deadline = time.monotonic() + 3600
    while True:
        batch.refresh_from_db()
        if batch.finished_at is not None:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{mode}: not finished after an hour: {batch.pending} pending")
        if ProviderBatch.objects.filter(
            status=ProviderBatch.Status.UNSENT, created_at__lt=timezone.now() - timedelta(minutes=2)
        ).exists():
            raise SystemExit("a provider batch still unsent after 2 minutes: see the deferred log")
        time.sleep(0.2)
    wall = time.perf_counter() - started
    jobs = LlmJob.objects.filter(batch_items__batch=batch).distinct()
    completed = jobs.filter(status=LlmJob.Status.COMPLETED, mode=mode).count()
    assert batch.status == Batch.Status.COMPLETED and completed == JOBS, (batch.status, completed)
    entries = CostEntry.objects.filter(job__in=jobs)
    ledger = entries.aggregate(s=Sum("cost_usd"))["s"] or Decimal(0)
    rows = entries.count()
    after = billed(provider)
    key = "batch_cost_usd" if mode == "deferred" else "cost_usd"
    bill = Decimal(str(after[key])) - Decimal(str(before[key]))
    assert abs(ledger - bill) <= rows * HALF_MICRO, (mode, ledger, bill, rows)
    notes = f"submitted in {submitted:.2f} s; ledger - bill ${ledger - bill}"
    notes += f" (rounding bound ${rows * HALF_MICRO})"
    if mode == "deferred":
        sent = ProviderBatch.objects.aggregate(
            n=Sum("items_total"), first=Min("created_at"), ended=Max("ended_at"),
            booked=Max("booked_at"),
        )  # fmt: skip
        phases = {
            "waiting for the flush": (sent["first"] - batch.created_at).total_seconds(),
            "claim, send and processing (simulated)": (
                sent["ended"] - sent["first"]
            ).total_seconds(),
            "poll and booking": (sent["booked"] - sent["ended"]).total_seconds(),
        }
        notes += (
            f"\n          {ProviderBatch.objects.count()} provider batch(es) of {sent['n']} jobs; "
            + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())
            + f"; largest here: {max(phases, key=phases.__getitem__)}"
        )
    return Run(mode, completed, wall, ledger, rows, bill, notes)


def measure(stack: Stack, provider: str) -> None:
    import django_rq
    import httpx
    from django.contrib.auth import get_user_model
    from rq import Worker

    django_rq.get_connection("default").flushdb()
    faults = {"batch_processing_seconds": PROCESSING_SECONDS}
    httpx.post(f"{provider}/_fake/faults", json=faults, timeout=10).raise_for_status()
    for _ in range(WORKERS):
        stack.start(procfile_command("worker_llm", respawn=False), "worker_llm")
    stack.start(procfile_command("deferred", respawn=False), "deferred")
    queue = django_rq.get_queue("llm")
    wait_for(lambda: len(Worker.all(queue=queue)) >= WORKERS, timeout=120, what="the llm workers")
    user = get_user_model().objects.create_user("bench-deferred")
    items = summaries()
    print(
        f"{machine()}; {JOBS} distinct summaries ({MODEL}, max_tokens {MAX_TOKENS}, about 120 "
        f"output tokens each), the same requests in each mode; fake provider at {LATENCY_MS} ms"
    )
    print(
        f"realtime: {WORKERS} x worker_llm; deferred: the deferred process, "
        f"LLM_DEFERRED_FLUSH_SECONDS={FLUSH_SECONDS}, LLM_DEFERRED_POLL_SECONDS={POLL_SECONDS}, "
        f"the provider's processing SIMULATED by the fake: batch_processing_seconds="
        f"{PROCESSING_SECONDS:g} (the real API takes minutes to hours, at most 24 h)"
    )
    runs = [run(user, mode, items, provider) for mode in ("realtime", "deferred")]
    for r in runs:
        print(
            f"{r.mode:>8}: {r.completed} jobs completed in {r.wall:.2f} s wall "
            f"({r.completed / r.wall:.1f} jobs/s); ledger ${r.ledger} ({r.rows} rows), "
            f"bill ${r.bill}; ${r.per_1000()} per 1,000 jobs"
        )
        print(f"          {r.notes}")
    realtime, deferred = runs
    print(
        f"cost deferred/realtime: {deferred.bill / realtime.bill:.3f} (bill), "
        f"{deferred.ledger / realtime.ledger:.3f} (ledger); time deferred/realtime: "
        f"{deferred.wall / realtime.wall:.2f}"
    )
    print(
        f"deferred completion: {PROCESSING_SECONDS:g} s of its {deferred.wall:.1f} s is the "
        "SIMULATED provider processing; the real API takes minutes to 24 h, which then dominates "
        "the completion time of deferred work (sending and booking are seconds to minutes)"
    )


if __name__ == "__main__":
    main()
