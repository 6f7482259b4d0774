"""Looking up RQ jobs by id, for the sweeps that put back what Redis lost.

The database is the source of truth; these helpers answer "is the RQ job that should carry this
row still going to run?" in one Redis round trip per batch, not one per row.
"""

from collections.abc import Callable, Sequence
from typing import TypeVar

from rq import Queue
from rq.job import Job, JobStatus

__all__ = [
    "DEAD_RQ_STATUSES",
    "rq_job_awaits_scheduler",
    "rq_job_is_alive",
    "rq_jobs_fetch",
    "rq_jobs_resume",
]

DEAD_RQ_STATUSES = {JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED, JobStatus.FINISHED}
"""An RQ job in one of these states will never run its task again."""

BATCH = 500
"""Job ids fetched per Redis round trip."""

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
