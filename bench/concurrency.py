"""Provider calls in flight per GB of worker memory: threaded llm workers next to forking ones.

    make bench-concurrency
    BENCH_THREADED_PROCESSES=1 BENCH_CONCURRENCY=256 BENCH_FORKING_WORKERS=20 make bench-concurrency

The fake provider answers every call after BENCH_LATENCY_MS (5,000 ms). For each kind of worker
the bench submits a backlog of jobs, starts the workers exactly as the Procfile does
(`manage.py rqworker llm --with-scheduler`), and every 0.2 s reads the calls the fake provider is
holding and the memory of every worker process and all its children (scheduler, work horses)
from /proc: resident memory (VmRSS, what the target counts) and proportional memory (Pss, which
splits the pages forked processes share). After BENCH_SECONDS the workers get SIGTERM (warm
shutdown); anything still alive after that is killed, children included.

- threaded: BENCH_THREADED_PROCESSES (2) processes, LLM_WORKER_CONCURRENCY=BENCH_CONCURRENCY
  (128) each;
- forking: BENCH_FORKING_WORKERS (20) processes, LLM_WORKER_CONCURRENCY=1 (rq's forking worker,
  one job per process).

Prints the peak of calls in flight, the memory at that peak, calls in flight per GB, and whether
the target holds (at least 200 calls in flight with at most 2 GB RSS across all worker
processes). Uses its own MariaDB database (BENCH_CONCURRENCY_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_concurrency, recreated) and Redis index 12 (flushed).
"""

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LATENCY_MS = int(os.environ.get("BENCH_LATENCY_MS", "5000"))
THREADED_PROCESSES = int(os.environ.get("BENCH_THREADED_PROCESSES", "2"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "128"))
FORKING_WORKERS = int(os.environ.get("BENCH_FORKING_WORKERS", "20"))
SECONDS = float(os.environ.get("BENCH_SECONDS", str(3 * LATENCY_MS / 1000 + 5)))
DATABASE_URL = os.environ.get(
    "BENCH_CONCURRENCY_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_concurrency"
)
REDIS_URL = os.environ.get("BENCH_CONCURRENCY_REDIS_URL", "redis://127.0.0.1:6379/12")
TARGET_IN_FLIGHT = 200
TARGET_RSS_BYTES = 2 * 1024**3
SAMPLE_SECONDS = 0.2
GB = 1024**3
MB = 1024**2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- processes and their memory ------------------------------------------------------------------


def children_of() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The command may hold spaces and parentheses: the parent pid follows the last ")".
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    return children


def tree(pids: list[int]) -> list[int]:
    """These processes and all their descendants (work horses, the scheduler)."""
    children, found, todo = children_of(), [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def memory(pid: int) -> tuple[int, int] | None:
    """(RSS, PSS) of one process in bytes, or None once it is gone."""
    try:
        rss = next(
            int(line.split()[1]) * 1024
            for line in (Path("/proc") / str(pid) / "status").read_text().splitlines()
            if line.startswith("VmRSS:")
        )
        pss = next(
            int(line.split()[1]) * 1024
            for line in (Path("/proc") / str(pid) / "smaps_rollup").read_text().splitlines()
            if line.startswith("Pss:")
        )
    except (OSError, StopIteration):
        return None
    return rss, pss


def cpu_seconds(pid: int) -> float:
    """User + system time of a process and of its children it has reaped (work horses)."""
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime, stime, cutime, cstime: fields 14-17 of stat(5), 11-14 after the command.
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def kill_tree(pids: list[int]) -> None:
    for pid in reversed(tree(pids)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- one run ----------------------------------------------------------------------------------


@dataclass
class Run:
    name: str
    command: str
    processes: int = 0
    peak_in_flight: int = 0
    sampled_peak: int = 0
    rss_at_peak: int = 0
    pss_at_peak: int = 0
    max_rss: int = 0
    mean_in_flight: float = 0.0
    answered: int = 0
    window: float = 0.0
    cpu: float = 0.0
    completed: int = 0
    calls: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def calls_per_second(self) -> float:
        return self.answered / self.window if self.window else 0.0

    @property
    def cpu_ms_per_call(self) -> float:
        return 1000 * self.cpu / self.answered if self.answered else 0.0

    def per_gb(self, memory_bytes: int) -> float:
        return self.peak_in_flight / (memory_bytes / GB) if memory_bytes else 0.0


def run(name: str, count: int, concurrency: int, jobs: int, env: dict[str, str], fake: str) -> Run:
    import django_rq
    import httpx
    from django.contrib.auth import get_user_model

    from jobs.models import LlmJob
    from jobs.services import job_submit
    from llmops.queues import LLM_QUEUE

    django_rq.get_connection(LLM_QUEUE).flushdb()
    httpx.post(f"{fake}/_fake/reset").raise_for_status()
    httpx.post(f"{fake}/_fake/faults", json={"latency_ms": LATENCY_MS}).raise_for_status()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    first = LlmJob.objects.order_by("-created_at").values_list("created_at", flat=True).first()
    for i in range(jobs):
        job_submit(
            user=user,
            data={
                "feature": f"bench-{i % 5}",
                "model": "claude-haiku-4-5",
                "messages": [{"role": "user", "content": f"{name} ticket {i}: refund"}],
                "max_tokens": 64,
            },
        )
    result = Run(
        name,
        f"{count} x `rqworker llm --with-scheduler`, LLM_WORKER_CONCURRENCY={concurrency}",
    )
    worker_env = {**env, "LLM_WORKER_CONCURRENCY": str(concurrency)}
    workers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "rqworker", LLM_QUEUE, "--with-scheduler"],
            cwd=ROOT,
            env=worker_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(count)
    ]
    pids = [w.pid for w in workers]
    try:
        started = None
        in_flight: list[int] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
            started is None or time.monotonic() - started < SECONDS
        ):
            stats = httpx.get(f"{fake}/_fake/stats").json()
            if started is None and stats["requests"]:
                started = time.monotonic()
                answered_before = sum(stats["by_status"].values())
                cpu_before = sum(map(cpu_seconds, tree(pids)))
            if started is not None:
                in_flight.append(stats["in_flight"])
            everyone = tree(pids)
            sizes = [m for m in map(memory, everyone) if m is not None]
            rss, pss = sum(m[0] for m in sizes), sum(m[1] for m in sizes)
            result.max_rss = max(result.max_rss, rss)
            if stats["in_flight"] > result.sampled_peak:
                result.sampled_peak = stats["in_flight"]
                result.rss_at_peak, result.pss_at_peak = rss, pss
                result.processes = len(sizes)
            time.sleep(SAMPLE_SECONDS)
        stats = httpx.get(f"{fake}/_fake/stats").json()
        result.peak_in_flight = stats["peak_in_flight"]
        if started is not None:
            result.window = time.monotonic() - started
            result.answered = sum(stats["by_status"].values()) - answered_before
            result.cpu = sum(map(cpu_seconds, tree(pids))) - cpu_before
            # Once the first calls could have come back: the level the workers keep up.
            steady = in_flight[int(LATENCY_MS / 1000 / SAMPLE_SECONDS) :]
            result.mean_in_flight = sum(steady) / len(steady) if steady else 0.0
        if result.peak_in_flight > result.sampled_peak:
            result.notes.append(
                f"memory taken at {result.sampled_peak} in flight (the most a sample saw)"
            )
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        stop_by = time.monotonic() + LATENCY_MS / 1000 + 30
        for worker in workers:
            try:
                worker.wait(timeout=max(0.1, stop_by - time.monotonic()))
            except subprocess.TimeoutExpired:
                result.notes.append(f"worker {worker.pid} killed after its warm shutdown")
        kill_tree(pids)
        for worker in workers:
            worker.wait()
    newer = LlmJob.objects.filter(created_at__gt=first) if first else LlmJob.objects.all()
    result.completed = newer.filter(status="completed").count()
    result.calls = int(httpx.get(f"{fake}/_fake/stats").json()["requests"])
    return result


def main() -> None:
    port = free_port()
    fake_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "ANTHROPIC_BASE_URL": fake_url,
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
    import httpx

    fake = subprocess.Popen(
        [py, "manage.py", "fake_anthropic", "--port", str(port), "--latency-ms", str(LATENCY_MS)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):
            try:
                httpx.get(f"{fake_url}/_fake/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        # A backlog that outlasts the measurement: every slot busy for the whole window.
        rounds = int(SECONDS * 1000 / LATENCY_MS) + 2
        slots = THREADED_PROCESSES * CONCURRENCY
        threaded = run("threaded", THREADED_PROCESSES, CONCURRENCY, rounds * slots, env, fake_url)
        forking = run("forking", FORKING_WORKERS, 1, rounds * FORKING_WORKERS, env, fake_url)
    finally:
        fake.terminate()
        fake.wait()
    report([threaded, forking])


def report(runs: list[Run]) -> None:
    command = (
        f"BENCH_LATENCY_MS={LATENCY_MS} BENCH_THREADED_PROCESSES={THREADED_PROCESSES} "
        f"BENCH_CONCURRENCY={CONCURRENCY} BENCH_FORKING_WORKERS={FORKING_WORKERS} "
        f"BENCH_SECONDS={SECONDS:g} .venv/bin/python bench/concurrency.py"
    )
    total_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GB
    print(f"$ {command}")
    print(
        f"machine: {len(os.sched_getaffinity(0))} cores, {total_gb:.1f} GB RAM; "
        f"fake provider latency {LATENCY_MS} ms; {SECONDS:g} s per kind of worker"
    )
    print(
        f"{'worker':<10} {'processes':>9} {'peak in flight':>14} {'RSS at peak':>12} "
        f"{'PSS at peak':>12} {'per GB RSS':>10} {'per GB PSS':>10} {'completed':>9}"
    )
    for r in runs:
        print(
            f"{r.name:<10} {r.processes:>9} {r.peak_in_flight:>14} "
            f"{r.rss_at_peak / MB:>9.0f} MB {r.pss_at_peak / MB:>9.0f} MB "
            f"{r.per_gb(r.rss_at_peak):>10.1f} {r.per_gb(r.pss_at_peak):>10.1f} {r.completed:>9}"
        )
    for r in runs:
        print(f"  {r.name}: {r.command}; most RSS seen {r.max_rss / MB:.0f} MB")
        print(
            f"    after the first {LATENCY_MS / 1000:g} s: {r.mean_in_flight:.0f} calls in flight "
            f"on average; {r.calls_per_second:.1f} calls answered/s; worker CPU "
            f"{r.cpu_ms_per_call:.0f} ms per call"
        )
        for note in r.notes:
            print(f"    note: {note}")
    threaded = runs[0]
    met = threaded.peak_in_flight >= TARGET_IN_FLIGHT and threaded.max_rss <= TARGET_RSS_BYTES
    print(
        f"target (>= {TARGET_IN_FLIGHT} calls in flight, <= 2 GB RSS across all worker "
        f"processes): {'met' if met else 'NOT MET'} ({threaded.peak_in_flight} in flight, "
        f"at most {threaded.max_rss / MB:.0f} MB RSS)"
    )
    if runs[1].per_gb(runs[1].rss_at_peak):
        ratio = threaded.per_gb(threaded.rss_at_peak) / runs[1].per_gb(runs[1].rss_at_peak)
        print(f"threaded vs forking, calls in flight per GB of RSS: {ratio:.0f} x")


if __name__ == "__main__":
    main()
