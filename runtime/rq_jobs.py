"""Looking up RQ jobs by id, for the sweeps that put back what Redis lost.

The database is the source of truth; these helpers answer "is the RQ job that should carry this
row still going to run?" in one Redis round trip per batch, not one per row.
"""

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar

from rq import Queue
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.utils import as_text, now, utcparse
from rq.worker import BaseWorker

__all__ = [
    "DEAD_RQ_STATUSES",
    "rq_job_awaits_scheduler",
    "rq_job_is_alive",
    "rq_jobs_abandoned",
    "rq_jobs_fetch",
    "rq_jobs_resume",
]

DEAD_RQ_STATUSES = {JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED, JobStatus.FINISHED}
"""An RQ job in one of these states will never run its task again."""

BATCH = 500
"""Job ids fetched per Redis round trip."""
FIRST_SEEN_TTL_SECONDS = 24 * 3600
"""How long the first sight of a job stuck in a queue's intermediate list is kept (as rq does)."""

RowId = TypeVar("RowId")


def rq_jobs_fetch(*, queue: Queue, job_ids: Sequence[str]) -> list[Job | None]:
    """The RQ jobs of ``job_ids``, in order; None where Redis has none (or the id is empty)."""
    found: list[Job | None] = []
    for start in range(0, len(job_ids), BATCH):
        batch = job_ids[start : start + BATCH]
        wanted = [job_id for job_id in batch if job_id]
        jobs = dict(
            zip(
                wanted,
                Job.fetch_many(wanted, connection=queue.connection, serializer=queue.serializer)
                if wanted
                else [],
                strict=True,
            )
        )
        found.extend(jobs.get(job_id) if job_id else None for job_id in batch)
    return found


def rq_job_is_alive(job: Job | None) -> bool:
    """Whether the job is still going to run (queued, scheduled, started, deferred)."""
    return job is not None and job.get_status(refresh=False) not in DEAD_RQ_STATUSES


def rq_job_awaits_scheduler(job: Job | None) -> bool:
    """Whether the job waits in a scheduled registry for a scheduler to move it onto its queue
    (it is not on the queue yet, nor running)."""
    return job is not None and job.get_status(refresh=False) == JobStatus.SCHEDULED


def rq_jobs_abandoned(
    *, queue: Queue, jobs: Sequence[Job | None], stale_before: datetime
) -> list[bool]:
    """For each RQ job of ``queue``, whether a worker took it off the queue and died with it
    (``kill -9``, a crash, a main loop that quit on an exception), in two Redis round trips.

    rq still calls such a job alive: it cleans up after a dead worker only at its maintenance
    pass, every ten minutes, and only a minute after it first saw the job stuck. Here:

    - ``started``: its worker (``job.worker_name``) is dead when the worker's key is gone, says
      it died, or its ``last_heartbeat`` is older than ``stale_before``. Every worker beats as
      it starts a job; the thread-pool worker's monitor then beats every
      ``LLM_HEARTBEAT_SECONDS`` however long its jobs wait before their claim (rq's forking
      parent every ``job_monitoring_interval``).
    - ``queued`` but in the queue's intermediate list: taken by a worker's ``BLMOVE`` and never
      started. A live worker starts a job it took within milliseconds, and rq records no worker
      before that, so the job counts from the first look that found it there (rq's own
      first-seen key, which rq's cleanup reads too) and is abandoned once that was before
      ``stale_before``.
    """
    abandoned = [False] * len(jobs)
    started = [
        (i, job)
        for i, job in enumerate(jobs)
        if job is not None and job.get_status(refresh=False) == JobStatus.STARTED
    ]
    queued = [
        (i, job)
        for i, job in enumerate(jobs)
        if job is not None and job.get_status(refresh=False) == JobStatus.QUEUED
    ]
    if not started and not queued:
        return abandoned
    connection = queue.connection
    intermediate = IntermediateQueue(queue.key, connection)
    worker_names = sorted({job.worker_name for _, job in started if job.worker_name})
    with connection.pipeline(transaction=False) as pipe:
        for name in worker_names:
            pipe.hmget(BaseWorker.redis_worker_namespace_prefix + name, "last_heartbeat", "death")
        pipe.lrange(intermediate.key, 0, -1)
        *beats, taken = pipe.execute()
    alive = {
        name: beat is not None and death is None and utcparse(as_text(beat)) >= stale_before
        for name, (beat, death) in zip(worker_names, beats, strict=True)
    }
    for i, job in started:
        # A started job without a worker's name is rq's to clean up, as before.
        abandoned[i] = job.worker_name is not None and not alive.get(job.worker_name, True)
    taken_ids = {as_text(job_id) for job_id in taken}
    dequeued = [(i, job) for i, job in queued if job.id in taken_ids]
    if dequeued:
        with connection.pipeline(transaction=False) as pipe:
            for _, job in dequeued:
                key = intermediate.get_first_seen_key(job.id)
                pipe.set(key, now().timestamp(), nx=True, ex=FIRST_SEEN_TTL_SECONDS)
                pipe.get(key)
            first_seen = pipe.execute()[1::2]
        for (i, _), seen in zip(dequeued, first_seen, strict=True):
            abandoned[i] = seen is not None and float(seen) < stale_before.timestamp()
    return abandoned


def rq_jobs_resume(
    *,
    queue: Queue,
    ids: Sequence[RowId],
    job_id_for: Callable[[RowId], str],
    enqueue: Callable[[RowId], object],
) -> int:
    """Enqueue again each row whose fixed-id RQ job (``job_id_for(id)``) is gone from Redis or
    dead; a job still waiting or running is left alone. Returns how many were enqueued."""
    rq_jobs = rq_jobs_fetch(queue=queue, job_ids=[job_id_for(i) for i in ids])
    resumed = 0
    for row_id, rq_job in zip(ids, rq_jobs, strict=True):
        if rq_job_is_alive(rq_job):
            continue
        if rq_job is not None:
            # A dead job keeps its id (a failed one for a year): free it to run again.
            rq_job.delete()
        enqueue(row_id)
        resumed += 1
    return resumed
