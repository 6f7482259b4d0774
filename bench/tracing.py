"""The job path with traces on: the same jobs through the same worker with tracing off, with
export on to a collector that answers, and with export on to a collector that hangs (accepts,
reads, never answers: a cut-off host), each in its own round.

    make bench-tracing                          # 300 jobs a round, 1 worker
    BENCH_TRACING_JOBS=1000 make bench-tracing
    BENCH_TRACING_ORDER=on-collector-hangs,on-collector-up,off make bench-tracing

Uses its own MariaDB database (BENCH_TRACING_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_tracing, recreated) and Redis index 11
(BENCH_TRACING_REDIS_URL, flushed). The fake provider answers at 0 ms, so the job path's own
time is what is measured: per job, claim to complete (p50, p95) from the rows, and jobs/s from the
first claim to the last completion. The collector is tests/otlp_receiver.py (OTLP/HTTP, as an
OpenTelemetry Collector's receiver); the spans it received and the counts on
``llm_trace_spans_total`` are printed after each round.
"""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stack import Stack, django_bench, machine, procfile_command  # noqa: E402

JOBS = int(os.environ.get("BENCH_TRACING_JOBS", "300"))
DATABASE_URL = os.environ.get(
    "BENCH_TRACING_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_tracing"
)
REDIS_URL = os.environ.get("BENCH_TRACING_REDIS_URL", "redis://127.0.0.1:6379/11")


def job_data(feature: str, i: int) -> dict[str, Any]:
    return {
        "feature": feature,
        "model": "claude-haiku-4-5",
        "messages": [{"role": "user", "content": f"Classify ticket {i}: please refund my order"}],
        "max_tokens": 128,
    }


def run_round(stack: Stack, name: str, otel: dict[str, str]) -> dict[str, float]:
    from django.contrib.auth import get_user_model

    from jobs.models import LlmJob
    from jobs.services import job_submit
    from tracing.setup import span_counts

    user, _ = get_user_model().objects.get_or_create(username="bench-tracing")
    for i in range(JOBS):
        job_submit(user=user, data=job_data(name, i))
    env = {**stack.env, **otel}
    started = time.perf_counter()
    log = (stack.log_dir / f"worker-{name}.log").open("wb")
    args = [*procfile_command("worker_llm", respawn=False), "--burst"]
    subprocess.run(args, cwd=ROOT, env=env, stdout=log, stderr=log, check=True, timeout=1800)
    wall = time.perf_counter() - started
    rows = list(
        LlmJob.objects.filter(feature=name, status=LlmJob.Status.COMPLETED).values_list(
            "started_at", "completed_at"
        )
    )
    runs = sorted((end - start).total_seconds() * 1000 for start, end in rows)
    seconds = (max(r[1] for r in rows) - min(r[0] for r in rows)).total_seconds()
    counts = span_counts()
    return {
        "completed": len(rows),
        "p50": statistics.median(runs),
        "p95": runs[int(len(runs) * 0.95) - 1],
        "rate": len(rows) / seconds,
        "wall": wall,
        **{f"spans_{key}": value for key, value in counts.items()},
    }


def main() -> None:
    from tests.otlp_receiver import OtlpReceiver

    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
        "LLM_RATE_LIMIT_ENABLED": "False",
    }
    for name in [name for name in env if name.startswith("OTEL_")]:
        del env[name]
    with django_bench(env, prefix="bench-tracing-") as stack:
        import django_rq

        django_rq.get_connection("llm").flushdb()
        print(
            f"{machine()}; 1 x `{' '.join(procfile_command('worker_llm', respawn=False))} "
            f"--burst`; {JOBS} jobs a round; fake provider at 0 ms"
        )
        with OtlpReceiver() as answering, OtlpReceiver(frozen=True) as hanging:
            rounds = [
                ("off", {}, None),
                ("on-collector-up", {"OTEL_EXPORTER_OTLP_ENDPOINT": answering.url}, answering),
                ("on-collector-hangs", {"OTEL_EXPORTER_OTLP_ENDPOINT": hanging.url}, hanging),
            ]
            # BENCH_TRACING_ORDER=on-collector-hangs,off,... runs the rounds in that order: each
            # round's jobs add rows, so a later round works on a larger table.
            order = os.environ.get("BENCH_TRACING_ORDER", "")
            if order:
                by_name = {round_[0]: round_ for round_ in rounds}
                rounds = [by_name[name] for name in order.split(",")]
            for name, otel, collector in rounds:
                figures = run_round(stack, name, otel)
                got = "" if collector is None else f", collector got {len(collector.spans)}"
                print(
                    f"{name:>20}: {figures['completed']}/{JOBS} completed, claim to complete "
                    f"p50 {figures['p50']:.1f} ms, p95 {figures['p95']:.1f} ms, "
                    f"{figures['rate']:.1f} jobs/s (worker's wall {figures['wall']:.1f} s); "
                    f"spans so far: exported {figures['spans_exported']}, failed "
                    f"{figures['spans_failed']}, dropped {figures['spans_dropped']}{got}"
                )
    print("command: make bench-tracing" + (f" BENCH_TRACING_JOBS={JOBS}" if JOBS != 300 else ""))


if __name__ == "__main__":
    main()
