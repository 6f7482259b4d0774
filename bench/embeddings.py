"""Embedding inputs per second through a 10,000-item embedding batch: submitted through the
batch service, its distinct texts grouped into jobs of LLM_EMBEDDING_GROUP_SIZE, run by the
Procfile's llm workers against the fake provider's OpenAI-compatible Embeddings API (instant,
1,536-dimension vectors as base64 float32), the vectors stored and every item's vector read
back through the batch's embeddings pages.

    make bench-embeddings                                  # 10,000 items, 2 workers
    BENCH_EMBED_ITEMS=20000 BENCH_EMBED_WORKERS=4 make bench-embeddings

Uses its own MariaDB database (BENCH_EMBED_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_embeddings, recreated) and Redis index 13
(BENCH_EMBED_REDIS_URL, flushed). Prints the figures; asserts nothing but completeness (every
item completed, as many ledger rows as provider calls) and prints the ledger beside the bill.
"""

import os
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stack import Stack, machine, procfile_command, recreate_database  # noqa: E402

ITEMS = int(os.environ.get("BENCH_EMBED_ITEMS", "10000"))
WORKERS = int(os.environ.get("BENCH_EMBED_WORKERS", "2"))
DATABASE_URL = os.environ.get(
    "BENCH_EMBED_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_embeddings"
)
REDIS_URL = os.environ.get("BENCH_EMBED_REDIS_URL", "redis://127.0.0.1:6379/13")
MODEL = "text-embedding-3-small"


def main() -> None:
    import subprocess

    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
    }
    recreate_database(DATABASE_URL)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    with tempfile.TemporaryDirectory(prefix="bench-embeddings-") as logs:
        stack = Stack(env, Path(logs))
        try:
            provider = stack.fake_provider(latency_ms=0)
            env["ANTHROPIC_BASE_URL"] = stack.env["ANTHROPIC_BASE_URL"] = provider
            os.environ.update(env)
            import django

            django.setup()
            measure(stack, provider)
        finally:
            stack.stop()


def measure(stack: Stack, provider: str) -> None:
    import django_rq
    import httpx
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from batches.models import Batch
    from batches.services import batch_submit
    from ledger.models import CostEntry
    from ledger.price_table import model_price_set
    from providers.services import provider_save

    django_rq.get_connection("default").flushdb()
    provider_save(name="local-openai", kind="openai", base_url=f"{provider}/openai/v1")
    model_price_set(
        model=MODEL,
        provider="local-openai",
        input_per_mtok=Decimal("0.02"),
        output_per_mtok=Decimal(0),
        kind="embedding",
    )
    user = get_user_model().objects.create_user("bench-embeddings")
    items = [{"input": f"Product {i}: a sentence of about sixty characters to embed."}
             for i in range(ITEMS)]  # fmt: skip
    print(
        f"{machine()}; {ITEMS} distinct texts, groups of {settings.LLM_EMBEDDING_GROUP_SIZE}, "
        f"{WORKERS} x worker_llm; fake provider at 0 ms, 1,536 dimensions"
    )
    started = time.perf_counter()
    batch, _ = batch_submit(
        user=user, data={"kind": "embedding", "feature": "bench", "model": MODEL, "items": items}
    )
    submitted = time.perf_counter() - started
    print(f"submitted in {submitted:.2f} s: {batch.jobs_total} embedding jobs")
    run_started = time.perf_counter()
    for _ in range(WORKERS):
        stack.start(procfile_command("worker_llm", respawn=False), "worker_llm")
    deadline = time.monotonic() + 1800
    while True:
        batch.refresh_from_db()
        if batch.finished_at is not None:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"batch not finished after 30 minutes: {batch.pending} pending")
        time.sleep(0.2)
    ran = time.perf_counter() - run_started
    assert batch.status == Batch.Status.COMPLETED and batch.completed == ITEMS, batch.status
    entries = CostEntry.objects.filter(job__batch_items__batch=batch).distinct()
    ledger = sum((e.cost_usd for e in entries), Decimal(0))
    bill = Decimal(httpx.get(f"{provider}/_fake/stats").json()["billed"]["cost_usd"])
    print(
        f"ran in {ran:.2f} s from the workers' start: {ITEMS / ran:.0f} inputs/s, "
        f"{batch.jobs_total / ran:.1f} calls/s; {entries.count()} ledger rows, "
        f"ledger ${ledger} for a bill of ${bill}"
    )
    client = APIClient()
    client.force_authenticate(user)
    read_started = time.perf_counter()
    url: str | None = f"/api/v1/batches/{batch.id}/embeddings/?page_size=200"
    vectors = 0
    while url:
        page = client.get(url, HTTP_HOST="127.0.0.1").json()
        vectors += sum(1 for r in page["results"] if r["embedding"])
        url = page["next"]
    read = time.perf_counter() - read_started
    assert vectors == ITEMS, vectors
    print(f"read every vector back in {read:.2f} s ({ITEMS / read:.0f} vectors/s, pages of 200)")
    print(
        f"end to end: {ITEMS / (submitted + ran):.0f} inputs/s (submit + run), "
        f"{ITEMS / (submitted + ran + read):.0f} inputs/s with the read"
    )


if __name__ == "__main__":
    main()
