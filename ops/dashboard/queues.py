"""The dashboard's panels read from Redis: queue depths, workers and what each runs, and the
wait and runtime of the queues that have no job rows (from rq's finished registry).

Read only (registries are counted with ``cleanup=False``). When Redis does not answer, every one
of these panels says "Redis unavailable" and the rest of the dashboard is still served.
"""

import re
import uuid

import django_rq
from django.conf import settings
from django.urls import reverse
from redis.exceptions import RedisError
from rq import Worker
from rq.job import Job
from rq.worker import BaseWorker

from jobs.models import LlmJob
from llmops.queues import (
    AGENTS_QUEUE,
    ALERTS_QUEUE,
    DEFAULT_QUEUE,
    LLM_QUEUE,
    QUEUE_NAMES,
    RUN_LLM_JOB_TASK,
)
from loops.queue_health import oldest_wait_seconds
from ops.dashboard.database import as_seconds, nearest_rank
from ops.dashboard.defaults import PERCENTS, RQ_TIMING_SAMPLE

__all__ = ["percentiles_of", "redis_panels", "rq_timings", "unmeasured", "worker_label"]

GENERATED_NAME = re.compile(r"[0-9a-f]{32}")
"""The name rq gives a worker that was not named (``uuid4().hex``): it tells a reader nothing."""


def worker_label(*, name: str, hostname: str | None, pid: int | None) -> str:
    """A worker as a reader finds it: the host and process it runs as ("web-1, pid 4242"),
    after its name when someone chose one."""
    where = f"{hostname or 'unknown host'}, pid {pid if pid is not None else '?'}"
    return where if GENERATED_NAME.fullmatch(name) else f"{name} on {where}"


def percentiles_of(values: list[float]) -> dict:
    if not values:
        return {f"p{p}": None for p in PERCENTS} | {"max": None}
    values = sorted(values)
    return {f"p{p}": round(values[nearest_rank(len(values), p)], 3) for p in PERCENTS} | {
        "max": round(values[-1], 3)
    }


def rq_timings(queue_name: str) -> dict:
    """A queue without job rows of its own, from the last jobs in rq's finished registry."""
    queue = django_rq.get_queue(queue_name)
    ids = queue.finished_job_registry.get_job_ids(0, RQ_TIMING_SAMPLE - 1, desc=True, cleanup=False)
    waits, runtimes = [], []
    for job in Job.fetch_many(ids, connection=queue.connection, serializer=queue.serializer):
        if job and job.enqueued_at and job.started_at and job.ended_at:
            waits.append((job.started_at - job.enqueued_at).total_seconds())
            runtimes.append((job.ended_at - job.started_at).total_seconds())
    return {
        "queue": queue_name,
        "measured": True,
        "source": (
            f"the last {len(waits)} jobs in rq's finished registry"
            if waits
            else "no job in rq's finished registry (rq keeps one for its result_ttl, 500 s)"
        ),
        "samples": len(waits),
        "wait": percentiles_of(waits),
        "runtime": percentiles_of(runtimes),
    }


def unmeasured(queue_name: str, reason: str | None) -> dict:
    return {
        "queue": queue_name,
        "measured": False,
        "source": reason or "not measured",
        "samples": 0,
        "wait": percentiles_of([]),
        "runtime": percentiles_of([]),
    }


# --- Redis: queues, workers, rq's registries ----------------------------------------------------


def redis_panels() -> dict:
    try:
        return {
            "available": True,
            "error": None,
            "queues": [_queue_state(name) for name in QUEUE_NAMES],
            "workers": _workers(),
            "timings": {
                name: rq_timings(name) for name in (DEFAULT_QUEUE, ALERTS_QUEUE, AGENTS_QUEUE)
            },
        }
    except RedisError as error:
        reason = f"Redis unavailable ({type(error).__name__})"
        return {"available": False, "error": reason, "queues": [], "workers": [], "timings": {}}


def _queue_state(name: str) -> dict:
    queue = django_rq.get_queue(name)
    waiting, oldest = oldest_wait_seconds(queue_name=name)
    return {
        "name": name,
        "waiting": waiting,
        "oldest_wait_seconds": as_seconds(oldest),
        # cleanup=False: a page view only reads; rq's own maintenance cleans the registries.
        "scheduled": queue.scheduled_job_registry.get_job_count(cleanup=False),
        "running": queue.started_job_registry.get_job_count(cleanup=False),
        "failed_in_rq": queue.failed_job_registry.get_job_count(cleanup=False),
        "workers": Worker.count(queue=queue),
        "threshold_seconds": settings.ALERT_QUEUE_WAIT_THRESHOLDS.get(name),
    }


def _workers() -> list[dict]:
    """Every worker listening on one of our queues, and every job it is running: one for a
    forking worker, up to its ``concurrency`` for a threaded one (runtime/threaded_worker.py).
    Both list their jobs in rq's own execution index of the worker (``rq:worker:<name>:executions``,
    kept by ``prepare_execution`` and the execution's cleanup); the LlmJob behind an llm RQ job
    links to its admin page."""
    workers: dict[str, BaseWorker] = {}
    for name in QUEUE_NAMES:
        for worker in Worker.all(queue=django_rq.get_queue(name)):
            workers.setdefault(worker.name, worker)
    connection = django_rq.get_connection(LLM_QUEUE)
    names = sorted(workers)
    with connection.pipeline(transaction=False) as pipeline:
        for name in names:
            pipeline.hget(workers[name].key, "concurrency")
        concurrency = dict(zip(names, pipeline.execute(), strict=True))
    running_ids = {
        name: [execution.job_id for execution in workers[name].get_current_executions()]
        for name in names
    }
    every_id = [job_id for ids in running_ids.values() for job_id in ids]
    running = {
        job.id: job for job in Job.fetch_many(every_id, connection=connection) if job is not None
    }
    llm_job_ids = {rq_id: _llm_job_id(job) for rq_id, job in running.items()}
    llm_jobs = {
        str(row["id"]): row
        for row in LlmJob.objects.filter(id__in=[i for i in llm_job_ids.values() if i]).values(
            "id", "feature", "model", "status", "attempts"
        )
    }

    def described(job: Job) -> dict:
        llm_job = llm_jobs.get(llm_job_ids.get(job.id) or "")
        return {
            "rq_job_id": job.id,
            "description": job.description,
            "started_at": job.started_at,
            "llm_job": None
            if llm_job is None
            else {
                "id": str(llm_job["id"]),
                "feature": llm_job["feature"],
                "model": llm_job["model"],
                "status": llm_job["status"],
                "attempts": llm_job["attempts"],
                "url": reverse("admin:jobs_llmjob_change", args=[llm_job["id"]]),
            },
        }

    rows = []
    for name in names:
        worker = workers[name]
        jobs = sorted(
            (described(running[i]) for i in running_ids[name] if i in running),
            key=lambda job: (job["started_at"] is None, job["started_at"] or 0, job["rq_job_id"]),
        )
        rows.append(
            {
                "name": name,
                "label": worker_label(name=name, hostname=worker.hostname, pid=worker.pid),
                "hostname": worker.hostname,
                "pid": worker.pid,
                "state": worker.get_state(),
                "queues": worker.queue_names(),
                "concurrency": int(concurrency[name] or 1),
                "last_heartbeat": worker.last_heartbeat,
                "successful_jobs": worker.successful_job_count,
                "failed_jobs": worker.failed_job_count,
                "running": jobs,
                # The first of them, for readers of one job per worker.
                "current": jobs[0] if jobs else None,
            }
        )
    return rows


def _llm_job_id(job: Job) -> str | None:
    """The LlmJob an RQ job runs: ``run_llm_job(job_id)`` carries it as its one argument."""
    if job.func_name != RUN_LLM_JOB_TASK or not job.args:
        return None
    try:
        return str(uuid.UUID(str(job.args[0])))
    except ValueError:
        return None
