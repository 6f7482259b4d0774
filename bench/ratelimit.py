"""The shared rate limiter at the provider's limit: W worker processes, a backlog of jobs, and the
fake provider enforcing --rpm R over a sliding 60 s window with 1-3 s of latency per call, and
then (BENCH_SHORT_INTERVALS, default 0,5) also over any 5 s (--short-interval 5: at most R/12
in any 5 s, as the provider documents it may enforce a per-minute limit).

    make bench-ratelimit
    BENCH_RPM=120 BENCH_SECONDS=120 BENCH_WORKERS=2,4,8 .venv/bin/python bench/ratelimit.py
    BENCH_WORKERS=4 BENCH_SHORT_INTERVALS=5 .venv/bin/python bench/ratelimit.py

Nothing is configured: each run starts from an empty Redis, so the limiter learns R from the
provider's first answers (anthropic-ratelimit-* headers). For each W it prints the successful
calls per minute over BENCH_SECONDS from the first call, as a fraction of R (the provider admits
at most R in any 60 s, so R per minute is the ceiling); the share of calls answered 429 (the
fake provider refuses exactly the calls that would take its window over R: no 429 means it
never saw more than R in any 60 s); how often a job was held (back on the queue, no
attempt used); and the successes/429s per 10 s (a burst at each turn of the window shows).
Target: at least 0.95 of R with under 1 % 429s for each W.

Each line also says how close the calls came to a 5 s enforcement, from the provider's own
arrival log (``/_fake/arrivals``) over the measured span: the tightest span of n + 1 calls in a
row (n = R/12, what any 5 s admits: under 5,000 ms is a refusal) and how many such spans were
under 5 s. On the plain window it measures the jitter a short-window provider would meet.
The measuring is chaos/rate_use.py's, shared with the cluster drill's rate-limit scenario.

Uses its own MariaDB database (BENCH_RATELIMIT_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_ratelimit, recreated) and Redis index 7 (flushed;
BENCH_RATELIMIT_REDIS_URL to change it).
"""

import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RPM = int(os.environ.get("BENCH_RPM", "120"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "120"))
WORKER_COUNTS = [int(w) for w in os.environ.get("BENCH_WORKERS", "2,4,8").split(",")]
SHORT_INTERVALS = [float(s) for s in os.environ.get("BENCH_SHORT_INTERVALS", "0,5").split(",")]
"""0: the sliding 60 s window alone; S: the fake provider also enforces R over any S seconds."""
LATENCY_MS = os.environ.get("BENCH_LATENCY_MS", "1000-3000")
DATABASE_URL = os.environ.get(
    "BENCH_RATELIMIT_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_ratelimit"
)
REDIS_URL = os.environ.get("BENCH_RATELIMIT_REDIS_URL", "redis://127.0.0.1:6379/7")
MODEL = "claude-haiku-4-5"


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
        "LOG_LEVEL": "INFO",
        "LOG_FORMAT": "plain",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
    }
    # The workers log at INFO (their "held for" lines are counted); this process only warns.
    os.environ.update({**env, "LOG_LEVEL": "WARNING"})
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
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from chaos.rate_use import rate_use, sent, tightest
    from jobs.models import LlmJob
    from jobs.services import job_submit
    from ledger.models import CostEntry
    from llmops.queues import LLM_QUEUE

    redis = django_rq.get_connection(LLM_QUEUE)
    redis.flushdb()
    fake_args = ["manage.py", "fake_anthropic", "--port", str(port), "--rpm", str(RPM),
                 "--latency-ms", LATENCY_MS]  # fmt: skip
    # Every process started here stops with this one, however it ends (a SIGTERM or SIGHUP to
    # the benchmark included): a leftover worker would take the next run's jobs.
    started: list[subprocess.Popen[bytes]] = []
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGHUP, _exit)
    fake = subprocess.Popen([py, *fake_args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    started.append(fake)
    logs = Path(tempfile.mkdtemp(prefix="bench-ratelimit-"))
    results: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/_fake/health", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or fake.poll() is not None:
                    raise RuntimeError("the fake provider did not start") from None
                time.sleep(0.2)
        user = get_user_model().objects.create_user("bench")
        backlog = int(RPM * SECONDS / 60 * 1.4) + 50
        runs = [(short, workers) for short in SHORT_INTERVALS for workers in WORKER_COUNTS]
        for short, workers in runs:
            # A fresh start for each run: the provider's window, our limiter (learned again),
            # the queue; jobs left over from the last run can no longer run.
            LlmJob.objects.filter(status__in=LlmJob.WAITING_STATUSES).update(status="cancelled")
            redis.flushdb()
            httpx.post(f"http://127.0.0.1:{port}/_fake/reset").raise_for_status()
            if short:
                httpx.post(
                    f"http://127.0.0.1:{port}/_fake/faults",
                    json={"short_interval_seconds": short},
                ).raise_for_status()
            enforced = f"any {short:g} s and 60 s" if short else "60 s"
            round_started = time.time()
            for i in range(backlog):
                job_submit(
                    user=user,
                    data={
                        "feature": f"batch-{i % 3}",
                        "model": MODEL,
                        "messages": [{"role": "user", "content": f"Summarize note {i}: ok"}],
                        "max_tokens": 128,
                    },
                )
            processes = []
            for n in range(workers):
                log = (logs / f"w{workers}-{n}.log").open("wb")
                processes.append(
                    subprocess.Popen(
                        [py, "manage.py", "rqworker", LLM_QUEUE, "--with-scheduler"],
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=log,
                    )  # fmt: skip
                )
            started.extend(processes)
            this_run = CostEntry.objects.filter(
                job__created_at__gte=_dt(round_started)
            ).select_related("job")
            deadline = time.monotonic() + 120
            while not this_run.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no call in 120 s: see the worker logs in {logs}")
                time.sleep(0.2)
            first = min(sent(e) for e in this_run.all())
            # Until every call sent within the measured span has answered (3 s at most).
            time.sleep(max(0.0, first + SECONDS + 4 - time.time()))
            _stop(processes)
            use = rate_use(this_run.all(), first=first, seconds=SECONDS, rpm=RPM)
            holds = sum(
                (logs / f"w{workers}-{n}.log").read_text(errors="replace").count(" held for ")
                for n in range(workers)
            )
            provider = httpx.get(f"http://127.0.0.1:{port}/_fake/stats").json()["by_status"]
            arrivals = httpx.get(f"http://127.0.0.1:{port}/_fake/arrivals").json()["arrivals"]
            closest = tightest(arrivals, first, first + SECONDS, rpm=RPM)
            results.append(
                f"R over {enforced}, W={workers}: {use.summary()} (the provider's count for the "
                f"whole run: {provider}); jobs held (back on the queue, no attempt used): {holds}; "
                f"{closest}; {use.tens()}"
            )
            print(results[-1], flush=True)
    finally:
        _stop(started)

    concurrency = getattr(settings, "LLM_WORKER_CONCURRENCY", 1)
    print()
    print(
        f"fake provider --rpm {RPM} --latency-ms {LATENCY_MS} (sliding 60 s window; "
        f"--short-interval {','.join(f'{s:g}' for s in SHORT_INTERVALS)}, 0: none); nothing "
        f"configured (limits learned from the headers); W x `manage.py rqworker llm "
        f"--with-scheduler` ({settings.RQ['WORKER_CLASS']}, LLM_WORKER_CONCURRENCY="
        f"{concurrency}, LLM_RATE_LIMIT_BURST_SECONDS={settings.LLM_RATE_LIMIT_BURST_SECONDS:g}); "
        f"a backlog of {backlog} jobs per run; measured over {SECONDS:.0f} s "
        f"from each run's first call; {len(os.sched_getaffinity(0))} cores, "
        f"Python {sys.version.split()[0]}"
    )
    for line in results:
        print(line)
    workers_list = ",".join(map(str, WORKER_COUNTS))
    shorts = ",".join(f"{s:g}" for s in SHORT_INTERVALS)
    knobs = (
        f"BENCH_RPM={RPM} BENCH_SECONDS={SECONDS:g} BENCH_WORKERS={workers_list} "
        f"BENCH_SHORT_INTERVALS={shorts}"
    )
    print(
        f"reproduce: make bench-ratelimit  (or {knobs} "
        f"BENCH_LATENCY_MS={shlex.quote(LATENCY_MS)} .venv/bin/python bench/ratelimit.py)"
    )


def _exit(signum: int, frame: Any) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """Warm shutdown (SIGTERM: calls in flight finish), then SIGKILL for any that lingers."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _dt(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


if __name__ == "__main__":
    main()
