"""The per-job pipeline: LLM jobs per second through the workers with an instant fake provider,
next to a bare RQ no-op job on the same worker class in the same run, and what one job costs in
SQL queries and Redis round trips.

    make bench-pipeline              # 1,000 jobs of each kind, 2 workers
    BENCH_PIPELINE_JOBS=3000 BENCH_PIPELINE_WORKERS=4 make bench-pipeline
    BENCH_PIPELINE_SQL=1 .venv/bin/python bench/pipeline.py     # also list every query
    BENCH_PIPELINE_PROFILE_ONLY=1 .venv/bin/python bench/pipeline.py     # the profile alone

Uses its own MariaDB database (BENCH_PIPELINE_DATABASE_URL, default
mysql://root@127.0.0.1:3306/llmops_bench_pipeline, recreated) and Redis index 11
(BENCH_PIPELINE_REDIS_URL, flushed).

1. Throughput. BENCH_PIPELINE_JOBS no-op RQ jobs (``bench.pipeline.noop``) are enqueued on the
   llm queue and run by BENCH_PIPELINE_WORKERS copies of the Procfile's worker_llm line in burst
   mode (``manage.py rqworker llm --with-scheduler --burst``: whatever worker class the settings
   name, so the same class as production). Then as many LLM jobs are submitted (``job_submit``,
   the API's service) and run by fresh workers the same way against the fake provider at 0 ms.
   Each rate is jobs / (last job's end - first job's start), read from rq's job timestamps and
   the jobs' rows, so the workers' start-up is not counted. Prints both and the ratio (target:
   at least 0.5).
2. Profile. In this process, one job is submitted through the API view and run through rq's
   ``SimpleWorker`` (dequeue, ``run_llm_job``, rq's bookkeeping), and one more through
   ``job_run`` alone, each counted: SQL queries (django's ``CaptureQueriesContext``) and Redis
   round trips (every send on a redis-py connection, sync or asyncio: a pipeline is one round
   trip; the asyncio ones are the channel layer's live events).
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stack import Stack, machine, procfile_command, recreate_database  # noqa: E402

JOBS = int(os.environ.get("BENCH_PIPELINE_JOBS", "1000"))
WORKERS = int(os.environ.get("BENCH_PIPELINE_WORKERS", "2"))
SHOW_SQL = os.environ.get("BENCH_PIPELINE_SQL", "") not in ("", "0")
PROFILE_ONLY = os.environ.get("BENCH_PIPELINE_PROFILE_ONLY", "") not in ("", "0")
DATABASE_URL = os.environ.get(
    "BENCH_PIPELINE_DATABASE_URL", "mysql://root@127.0.0.1:3306/llmops_bench_pipeline"
)
REDIS_URL = os.environ.get("BENCH_PIPELINE_REDIS_URL", "redis://127.0.0.1:6379/11")
NOOP_TASK = "bench.pipeline.noop"


def noop() -> None:
    """The bare RQ job: what rq and the worker class cost with no work at all."""


def job_data(i: int) -> dict[str, Any]:
    return {
        "feature": f"bench-{i % 4}",
        "model": "claude-haiku-4-5",
        "messages": [{"role": "user", "content": f"Classify ticket {i}: please refund my order"}],
        "max_tokens": 128,
    }


# --- Counting Redis round trips -----------------------------------------------------------------


class RedisCounter:
    """Counts sends on every redis-py connection of this process, by the command they carry."""

    def __init__(self) -> None:
        self.round_trips: Counter[str] = Counter()
        self.active = False

    def install(self) -> None:
        import redis.asyncio.connection
        import redis.connection

        counter = self
        sync_send = redis.connection.AbstractConnection.send_packed_command
        async_send = redis.asyncio.connection.AbstractConnection.send_packed_command

        def what(command: Any) -> str:
            # The first command of what is sent: a pipeline shows as its first (MULTI for a
            # transaction), a script as EVALSHA.
            data = command if isinstance(command, bytes | str) else b"".join(command)
            if isinstance(data, str):
                data = data.encode()
            words = data.split(b"\r\n")
            return (words[2] if len(words) > 2 else words[0]).decode(errors="replace").upper()

        def send(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            if counter.active:
                counter.round_trips[what(command)] += 1
            return sync_send(self, command, *args, **kwargs)

        async def asend(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            if counter.active:
                counter.round_trips["channel layer: " + what(command)] += 1
            return await async_send(self, command, *args, **kwargs)

        redis.connection.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
        redis.asyncio.connection.AbstractConnection.send_packed_command = asend  # type: ignore[method-assign]

    @contextmanager
    def counting(self) -> Iterator[Counter[str]]:
        self.round_trips = Counter()
        self.active = True
        try:
            yield self.round_trips
        finally:
            # The live events leave on the sender thread a moment after the commit.
            time.sleep(0.2)
            self.active = False


def print_profile(label: str, queries: list[dict[str, Any]], round_trips: Counter[str]) -> None:
    print(f"  {label}: {len(queries)} SQL queries, {sum(round_trips.values())} Redis round trips")
    if SHOW_SQL:
        for query in queries:
            print(f"      {query['sql'][:140]}")
    for command, count in sorted(round_trips.items(), key=lambda item: (-item[1], item[0])):
        print(f"      {count:3d} x {command}")


# --- Throughput ---------------------------------------------------------------------------------


def run_workers(stack: Stack) -> float:
    command = [*procfile_command("worker_llm", respawn=False), "--burst"]
    started = time.perf_counter()
    workers = [stack.start(command, "worker_llm") for _ in range(WORKERS)]
    for worker in workers:
        worker.wait(timeout=3600)
    stack.processes.clear()
    return time.perf_counter() - started


def span(starts: list[Any], ends: list[Any]) -> float:
    return (max(ends) - min(starts)).total_seconds()


def main() -> None:
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "llmops.settings",
    }
    recreate_database(DATABASE_URL)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)

    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as logs:
        stack = Stack(env, Path(logs))
        try:
            provider = stack.fake_provider(latency_ms=0)
            env["ANTHROPIC_BASE_URL"] = stack.env["ANTHROPIC_BASE_URL"] = provider
            os.environ.update(env)
            import django

            django.setup()
            if not PROFILE_ONLY:
                throughput(stack)
            profile()
        finally:
            stack.stop()


def throughput(stack: Stack) -> None:
    import django_rq
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from rq.job import Job

    from jobs.models import LlmJob
    from jobs.services import job_submit
    from llmops.queues import LLM_QUEUE

    queue = django_rq.get_queue(LLM_QUEUE)
    queue.connection.flushdb()
    concurrency = getattr(settings, "LLM_WORKER_CONCURRENCY", 1)
    print(
        f"{machine()}; {WORKERS} x `{' '.join(procfile_command('worker_llm', respawn=False))} "
        "--burst`, "
        f"worker class {settings.RQ['WORKER_CLASS']} (LLM_WORKER_CONCURRENCY={concurrency}); "
        f"{JOBS} jobs of each kind; fake provider at 0 ms"
    )

    noop_ids = [
        job.id
        for job in queue.enqueue_many(
            [queue.prepare_data(NOOP_TASK, result_ttl=3600) for _ in range(JOBS)]
        )
    ]
    wall = run_workers(stack)
    noops = [job for job in Job.fetch_many(noop_ids, connection=queue.connection) if job]
    done = [job for job in noops if job.get_status(refresh=False) == "finished"]
    noop_seconds = span([j.started_at for j in done], [j.ended_at for j in done])
    noop_rate = len(done) / noop_seconds
    print(
        f"no-op RQ jobs: {len(done)}/{JOBS} finished in {noop_seconds:.2f} s = "
        f"{noop_rate:.1f} jobs/s (workers' wall time {wall:.1f} s)"
    )

    user = get_user_model().objects.create_user("bench-pipeline")
    started = time.perf_counter()
    for i in range(JOBS):
        job_submit(user=user, data=job_data(i))
    submit_rate = JOBS / (time.perf_counter() - started)
    wall = run_workers(stack)
    completed = LlmJob.objects.filter(status=LlmJob.Status.COMPLETED)
    times = list(completed.values_list("started_at", "completed_at", "created_at"))
    llm_seconds = span([t[0] for t in times], [t[1] for t in times])
    llm_rate = len(times) / llm_seconds
    other = dict(
        Counter(LlmJob.objects.exclude(status=LlmJob.Status.COMPLETED).values_list("status"))
    )
    print(
        f"LLM jobs: {len(times)}/{JOBS} completed in {llm_seconds:.2f} s = {llm_rate:.1f} jobs/s "
        f"(workers' wall time {wall:.1f} s; submitted through job_submit at {submit_rate:.0f}/s"
        + (f"; not completed: {other}" if other else "")
        + ")"
    )
    runs = [(t[1] - t[0]).total_seconds() * 1000 for t in times]
    print(f"  claim to complete per job: p50 {statistics.median(runs):.1f} ms")
    print(f"LLM / no-op throughput: {llm_rate / noop_rate:.2f}")


def profile() -> None:
    import django_rq
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from rq import SimpleWorker

    from jobs.models import LlmJob
    from jobs.runner import job_run
    from keys.testing import api_key_for
    from llmops.queues import LLM_QUEUE

    redis_counter = RedisCounter()
    redis_counter.install()
    queue = django_rq.get_queue(LLM_QUEUE)
    user = get_user_model().objects.create_user("bench-profile")
    client = Client(HTTP_AUTHORIZATION=f"Token {api_key_for(user)}", HTTP_HOST="localhost")

    def submit() -> str:
        # One feature throughout: its counter rows exist after the warm-up, as they do in a
        # running system (a first job of a feature, model and status makes its row once).
        response = client.post("/api/v1/jobs/", job_data(0), content_type="application/json")
        assert response.status_code == 202, response.content
        return str(response.json()["id"])

    # Warm: the first job of a process pays for imports, connections and counter rows.
    submit()
    SimpleWorker([queue], connection=queue.connection).work(burst=True)

    print("per job, in one process (the API's submit, then rq's SimpleWorker):")
    with CaptureQueriesContext(connection) as queries, redis_counter.counting() as round_trips:
        job_id = submit()
    print_profile("submit (POST /api/v1/jobs/)", queries.captured_queries, round_trips)
    job = LlmJob.objects.get(id=job_id)
    with CaptureQueriesContext(connection) as queries, redis_counter.counting() as round_trips:
        SimpleWorker([queue], connection=queue.connection).work(burst=True, max_jobs=1)
    job.refresh_from_db()
    assert job.status == LlmJob.Status.COMPLETED, job.status
    print_profile("worker (dequeue, run_llm_job, rq's bookkeeping)", queries.captured_queries,
                  round_trips)  # fmt: skip

    job = LlmJob.objects.get(id=submit())
    queue.empty()  # its RQ job is run by hand below
    with CaptureQueriesContext(connection) as queries, redis_counter.counting() as round_trips:
        outcome = job_run(job_id=str(job.id), rq_job_id=job.rq_job_id)
    assert outcome == "success", outcome
    print_profile("of which job_run alone", queries.captured_queries, round_trips)


if __name__ == "__main__":
    main()
    print(
        "command: make bench-pipeline  (or: .venv/bin/python bench/pipeline.py; "
        f"BENCH_PIPELINE_JOBS={JOBS} BENCH_PIPELINE_WORKERS={WORKERS})"
    )
