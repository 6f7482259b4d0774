"""The reconciler: the database is the source of truth, Redis is transport.

Each pass, in bounded batches:
- a ``running`` job whose heartbeat is stale and whose lock is gone lost its worker (``kill -9``,
  a crash, a worker cut off from Redis and the database): ``job_recover``;
- a waiting job whose RQ job vanished (Redis flushed, restarted, failed over; or never pushed
  because Redis was down at submit) is enqueued again;
- a ``retrying`` job whose retry is overdue by more than ``LLM_OVERDUE_RETRY_SECONDS`` is enqueued
  again even though its scheduled RQ job still exists: the worker holding rq's scheduler lock may
  be dead, and rq hands the scheduler over only at its ten-minute maintenance pass. A retry of a
  job whose worker died (``worker_lost``) goes as soon as it is due: that worker may well have
  been the one holding the scheduler (the arithmetic is at ``WORKER_LOST``). The stale
  scheduled copy, if it ever runs, no longer matches the row and exits. Only while that RQ job
  still waits for a scheduler: one already on the queue is on its way, and replacing it would
  send it to the back of a busy queue again at every pass, so that it never ran (the chaos drill
  found that: chaos/). A ``queued`` job held by the rate limiter (``job_hold``) waits for
  the scheduler the same way, and is enqueued again once its scheduled time is that overdue;
- a waiting job whose RQ job a worker took off the queue and never got to claim (it waited on the
  rate limiter, a database slot, or the worker's main loop quit on an exception) when that worker
  is dead: no heartbeat of the worker for ``LLM_STALE_AFTER_SECONDS`` (an RQ job ``started``),
  or the RQ job stuck that long in the queue's intermediate list (taken, never started). rq calls
  such a job alive until its own ten-minute cleanup; the worker's liveness decides here, and the
  claim keeps the dead worker's copy from ever running (it no longer matches the row).
While the provider's circuit breaker is open, waiting jobs are left alone except one per probe
period, which goes out as the probe call.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import django_rq
from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from rq import Queue
from rq.job import Job

from jobs.breaker import breakers_held
from jobs.models import LlmJob
from jobs.priorities import LOW
from jobs.services import job_enqueue_again, job_recover
from ledger.budgets import budget_release_unclaimed
from llmops.queues import LLM_QUEUE, job_lock_key
from providers.selectors import provider_models
from runtime.queue_order import promote_to_front
from runtime.rq_jobs import (
    rq_job_awaits_scheduler,
    rq_job_is_alive,
    rq_jobs_abandoned,
    rq_jobs_fetch,
)

__all__ = ["ReconcileReport", "reconcile_jobs", "requeue_waiting_jobs"]

logger = logging.getLogger(__name__)

WORKER_LOST = "worker_lost"
"""The reason code of a job ``job_recover`` took over from a dead worker."""

# A job whose worker was killed (kill -9) calls the provider again within two minutes
# (docs/operations.md, "No job is lost"). With the defaults, at worst:
#
#     heartbeat age at the kill     10 s  LLM_HEARTBEAT_SECONDS (20 s if that beat waited its
#                                         whole bound for a database slot)
#   + stale threshold               45 s  LLM_STALE_AFTER_SECONDS (its lock, 4 beats, is gone first)
#   + until a pass recovers it      10 s  LLM_RECONCILE_INTERVAL (+ the pass itself)
#   + until a pass enqueues it      10 s  the retry is due 3-3.9 s after the recovery (worker_lost:
#                                         3 s + 30 % jitter), within one interval, and goes once due
#   = 75 s (85 s after a slow beat), plus two passes and a worker's pick-up: 35-45 s for a loaded
#     machine before two minutes.
#
# The retry does not also wait LLM_OVERDUE_RETRY_SECONDS: the dead worker may have held rq's
# scheduler lock, which outlives it by 61 s and passes to a live worker only at that worker's
# ten-minute maintenance. That wait (15 s, with a pass every 15 s) made the worst case 104 s
# before any load. If the scheduler lives after all, it moves the retry within a second of its
# due time, and a copy enqueued here meanwhile finds the row changed and exits. The jobs the dead
# worker held before their claim need only the first three lines (65 s).

BATCH = 500
"""Rows looked at per query; a pass works through the backlog batch by batch."""
MAX_BATCHES_PER_PASS = 20
"""A pass stops after this many batches (10,000 jobs) so that it always ends; the next goes on."""


@dataclass
class ReconcileReport:
    requeued_lost: int = 0
    recovered_stale: int = 0
    requeued_overdue: int = 0
    requeued_abandoned: int = 0
    """Waiting jobs a dead worker had taken off the queue before their claim."""
    promoted_low: int = 0
    """Low-priority jobs that waited LLM_PRIORITY_MAX_WAIT_SECONDS, moved to the queue's front."""
    held_by_breaker: bool = False

    @property
    def changed(self) -> bool:
        return bool(
            self.requeued_lost
            or self.recovered_stale
            or self.requeued_overdue
            or self.requeued_abandoned
            or self.promoted_low
        )

    def __str__(self) -> str:
        text = (
            f"re-enqueued {self.requeued_lost} lost, recovered {self.recovered_stale} stale, "
            f"re-enqueued {self.requeued_overdue} overdue retries, "
            f"re-enqueued {self.requeued_abandoned} held by dead workers"
        ) + (
            f", moved {self.promoted_low} starved low-priority jobs ahead"
            if self.promoted_low
            else ""
        )
        return text + (" (circuit breaker open)" if self.held_by_breaker else "")


def _recover_stale(report: ReconcileReport) -> None:
    connection = django_rq.get_connection(LLM_QUEUE)
    cutoff = timezone.now() - timedelta(seconds=settings.LLM_STALE_AFTER_SECONDS)
    # A job running in a provider batch has no worker and no heartbeat: the deferred loop's.
    stale = LlmJob.objects.filter(status=LlmJob.Status.RUNNING, heartbeat_at__lt=cutoff).exclude(
        mode=LlmJob.Mode.DEFERRED, provider_batch__isnull=False
    )
    after = None
    for _ in range(MAX_BATCHES_PER_PASS):
        page = stale.filter(id__gt=after) if after else stale
        ids = list(page.order_by("id").values_list("id", flat=True)[:BATCH])
        if not ids:
            return
        after = ids[-1]
        with connection.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.exists(job_lock_key(job_id))
            locked = pipe.execute()
        for job_id, has_lock in zip(ids, locked, strict=True):
            if has_lock:
                continue  # a worker still holds it; its heartbeat is merely late
            if job_recover(job_id=job_id, stale_before=cutoff) is not None:
                report.recovered_stale += 1
                logger.warning(
                    "job %s lost its worker mid-attempt; recovered",
                    job_id,
                    extra={"job_id": str(job_id)},
                )


def _stranded(
    queue: Queue,
    rq_job: Job | None,
    *,
    status: str,
    next_attempt_at: datetime | None,
    cutoff: datetime,
) -> bool:
    """Whether a waiting job's RQ job still waits for a scheduler although it was due before
    ``cutoff``: a retry by its ``next_attempt_at``, a held queued job by its scheduled time."""
    if rq_job is None or not rq_job_awaits_scheduler(rq_job):
        return False
    if status == LlmJob.Status.RETRYING:
        return next_attempt_at is not None and next_attempt_at < cutoff
    scheduled = queue.connection.zscore(queue.scheduled_job_registry.key, rq_job.id)
    return scheduled is not None and float(scheduled) < cutoff.timestamp()


def _abandoned(queue: Queue, rows: list[tuple[Any, ...]], rq_jobs: list[Job | None]) -> list[bool]:
    """For each waiting row, whether a dead worker holds its RQ job (``rq_jobs_abandoned``) and
    the job's lock has lapsed: a copy that took the lock before its claim keeps it at most the
    lock's ttl (shorter than the stale threshold); while it lives, the next pass looks again
    rather than send a copy that would only find the job locked."""
    stale_before = timezone.now() - timedelta(seconds=settings.LLM_STALE_AFTER_SECONDS)
    abandoned = rq_jobs_abandoned(queue=queue, jobs=rq_jobs, stale_before=stale_before)
    held = [i for i, gone in enumerate(abandoned) if gone]
    if held:
        with queue.connection.pipeline(transaction=False) as pipe:
            for i in held:
                pipe.exists(job_lock_key(rows[i][0]))
            for i, locked in zip(held, pipe.execute(), strict=True):
                abandoned[i] = not locked
    return abandoned


def requeue_waiting_jobs(
    *, grace_seconds: float | None = None, report: ReconcileReport | None = None
) -> ReconcileReport:
    """Enqueue again the waiting jobs whose RQ job will never run them, and overdue retries."""
    report = report or ReconcileReport()
    queue = django_rq.get_queue(LLM_QUEUE)
    now = timezone.now()
    grace = settings.LLM_LOST_QUEUE_GRACE_SECONDS if grace_seconds is None else grace_seconds
    cutoff = now - timedelta(seconds=grace)
    overdue_cutoff = now - timedelta(seconds=settings.LLM_OVERDUE_RETRY_SECONDS)
    waiting = LlmJob.objects.filter(
        Q(status=LlmJob.Status.QUEUED, enqueued_at__lt=cutoff)
        # A retry is looked at once lost (grace) or overdue, whichever comes first; a dead
        # worker's job once due (the arithmetic at WORKER_LOST).
        | Q(status=LlmJob.Status.RETRYING, next_attempt_at__lt=max(cutoff, overdue_cutoff))
        | Q(status=LlmJob.Status.RETRYING, error_code=WORKER_LOST, next_attempt_at__lt=now)
    ).exclude(mode=LlmJob.Mode.DEFERRED)  # waiting for the deferred loop, not for the queue
    # Parked by a paused feature or provider: no RQ job on purpose (jobs/pauses.py).
    waiting = waiting.filter(held_reason="")
    held = breakers_held()
    if not held:
        _requeue(queue, waiting, report, now=now, overdue_cutoff=overdue_cutoff, limit=None)
        return report
    # An open breaker holds only its provider's jobs; every other provider's go out as usual,
    # and each open breaker whose probe is due lets one of its jobs out as its probe call.
    report.held_by_breaker = True
    held_models = provider_models(names=set(held))
    _requeue(
        queue,
        waiting.exclude(current_model__in=held_models),
        report,
        now=now,
        overdue_cutoff=overdue_cutoff,
        limit=None,
    )
    for provider, probe_due in sorted(held.items()):
        if probe_due:
            models = provider_models(names={provider})
            _requeue(
                queue,
                waiting.filter(current_model__in=models),
                report,
                now=now,
                overdue_cutoff=overdue_cutoff,
                limit=1,
            )
    return report


def _requeue(
    queue: Any,
    waiting: Any,
    report: ReconcileReport,
    *,
    now: datetime,
    overdue_cutoff: Any,
    limit: int | None,
) -> None:
    after = None
    for _ in range(MAX_BATCHES_PER_PASS):
        page = waiting.filter(id__gt=after) if after else waiting
        rows = list(
            page.order_by("id").values_list(
                "id", "rq_job_id", "status", "next_attempt_at", "error_code"
            )[:BATCH]
        )
        if not rows:
            break
        after = rows[-1][0]
        rq_jobs = rq_jobs_fetch(queue=queue, job_ids=[row[1] for row in rows])
        abandoned = _abandoned(queue, rows, rq_jobs)
        for (
            job_id,
            rq_job_id,
            status,
            next_attempt_at,
            error_code,
        ), rq_job, held_by_the_dead in zip(rows, rq_jobs, abandoned, strict=True):
            stranded = _stranded(
                queue,
                rq_job,
                status=status,
                next_attempt_at=next_attempt_at,
                cutoff=now if error_code == WORKER_LOST else overdue_cutoff,
            )
            if rq_job_is_alive(rq_job) and not stranded and not held_by_the_dead:
                continue
            if not job_enqueue_again(job_id=job_id, lost_rq_job_id=rq_job_id):
                continue
            if held_by_the_dead:
                report.requeued_abandoned += 1
                logger.warning(
                    "job %s: the worker that took its RQ job %s is dead; enqueued again",
                    job_id,
                    rq_job_id,
                    extra={"job_id": str(job_id)},
                )
            elif rq_job_is_alive(rq_job):
                report.requeued_overdue += 1
                logger.warning(
                    "job %s: %s overdue (scheduler gone?); enqueued now",
                    job_id,
                    "retry" if status == LlmJob.Status.RETRYING else "held job",
                    extra={"job_id": str(job_id)},
                )
            else:
                report.requeued_lost += 1
                logger.warning(
                    "job %s was missing from Redis; enqueued again",
                    job_id,
                    extra={"job_id": str(job_id)},
                )
            if limit is not None:
                limit -= 1
                if limit == 0:
                    return


def promote_starved_low_jobs(report: ReconcileReport | None = None) -> ReconcileReport:
    """The starvation bound of low priority (jobs/priorities.py): a low job still on the queue
    ``LLM_PRIORITY_MAX_WAIT_SECONDS`` after it was enqueued goes to the front of the queue."""
    report = report or ReconcileReport()
    cutoff = timezone.now() - timedelta(seconds=settings.LLM_PRIORITY_MAX_WAIT_SECONDS)
    starved = list(
        LlmJob.objects.filter(
            status__in=(LlmJob.Status.QUEUED, LlmJob.Status.RETRYING),
            priority=LOW,
            enqueued_at__lt=cutoff,
            held_reason="",
        )
        .exclude(mode=LlmJob.Mode.DEFERRED)
        .order_by("enqueued_at")
        .values_list("id", "rq_job_id")[:BATCH]
    )
    if not starved:
        return report
    queue = django_rq.get_queue(LLM_QUEUE)
    # Oldest last: each goes to the very front, so the oldest ends up first.
    for job_id, rq_job_id in reversed(starved):
        if rq_job_id and promote_to_front(queue, rq_job_id):
            report.promoted_low += 1
            logger.info(
                "job %s (low priority) waited %ss: moved to the front of the queue",
                job_id,
                int(settings.LLM_PRIORITY_MAX_WAIT_SECONDS),
                extra={"job_id": str(job_id)},
            )
    return report


def reconcile_jobs() -> ReconcileReport:
    report = ReconcileReport()
    _recover_stale(report)
    requeue_waiting_jobs(report=report)
    promote_starved_low_jobs(report)
    budget_release_unclaimed()  # reservations whose copy died before its claim (ledger/budgets.py)
    return report
