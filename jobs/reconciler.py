"""The reconciler: the database is the source of truth, Redis is transport.

It finds jobs whose RQ job vanished (Redis flushed, restarted, failed over) or whose worker died
mid-call (``kill -9``: the heartbeat stops and the lock expires) and puts them back on track.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta

import django_rq
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from redis import Redis
from rq import Queue

from jobs.models import LlmJob
from jobs.retry_policy import classify
from jobs.runner import AttemptFailure, job_lock_key, record_failed_attempt
from jobs.services import job_enqueue
from ledger.models import CostEntry
from llmops.rq_jobs import rq_job_is_alive, rq_jobs_fetch

__all__ = ["ReconcileReport", "reconcile_jobs"]

logger = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    requeued_lost: int = 0
    recovered_stale: int = 0

    def __str__(self) -> str:
        return f"re-enqueued {self.requeued_lost} lost, recovered {self.recovered_stale} stale"


def _requeue_lost(report: ReconcileReport, queue: Queue) -> None:
    cutoff = timezone.now() - timedelta(seconds=settings.LLM_LOST_QUEUE_GRACE_SECONDS)
    waiting = list(
        (
            LlmJob.objects.filter(status=LlmJob.Status.QUEUED, enqueued_at__lt=cutoff)
            | LlmJob.objects.filter(status=LlmJob.Status.RETRYING, next_attempt_at__lt=cutoff)
        ).only("id", "rq_job_id")
    )
    rq_jobs = rq_jobs_fetch(queue=queue, job_ids=[job.rq_job_id for job in waiting])
    for job, rq_job in zip(waiting, rq_jobs, strict=True):
        if rq_job_is_alive(rq_job):
            continue
        with transaction.atomic():
            fresh = LlmJob.objects.select_for_update().get(id=job.id)
            if fresh.status not in LlmJob.WAITING_STATUSES or fresh.rq_job_id != job.rq_job_id:
                continue
            job_enqueue(job=fresh)
        report.requeued_lost += 1
        logger.warning("job %s was missing from Redis; enqueued again", job.id)


def _recover_stale(report: ReconcileReport, connection: Redis) -> None:
    cutoff = timezone.now() - timedelta(seconds=settings.LLM_STALE_AFTER_SECONDS)
    stale = LlmJob.objects.filter(status=LlmJob.Status.RUNNING, heartbeat_at__lt=cutoff)
    for job in stale.only("id"):
        if connection.exists(job_lock_key(job.id)):
            continue  # a worker still holds it; its heartbeat is merely late
        with transaction.atomic():
            fresh = LlmJob.objects.select_for_update().get(id=job.id)
            if fresh.status != LlmJob.Status.RUNNING or (
                fresh.heartbeat_at is not None and fresh.heartbeat_at >= cutoff
            ):
                continue
            record_failed_attempt(
                fresh,
                AttemptFailure(
                    kind="worker_lost",
                    classification=classify(kind="worker_lost"),
                    # The worker died during the call: the provider may have billed it.
                    ledger_outcome=CostEntry.Outcome.UNKNOWN,
                    message="The worker stopped (killed or crashed) during the attempt.",
                ),
            )
        report.recovered_stale += 1
        logger.warning("job %s lost its worker mid-attempt; recovered", job.id)


def reconcile_jobs() -> ReconcileReport:
    queue = django_rq.get_queue("llm")
    report = ReconcileReport()
    _recover_stale(report, queue.connection)
    _requeue_lost(report, queue)
    return report
