"""Pruning: the content of what ended before a time, emptied; the rows and the money kept.

What is emptied, batch by batch (each batch one transaction):

- a final job (``completed``, ``failed``, ``cancelled``) that ended before the cutoff: its
  messages (or its agent-turn reference), system prompt, embedding input, request params (tools
  and their schemas may quote the prompt), output text and content blocks, and its stored
  vectors. A failed job whose dead letter is still open is kept whole: staff may requeue it.
- an agent run that finished (``completed``, ``cancelled``) before the cutoff: its first
  messages, system prompt and output, and every step's tool input and result or model content.
  A failed run may still be resumed: kept whole.
- a pipeline that finished before the cutoff: each step's request (the job body as submitted).

Kept: every row and its status, model, tokens, cost, times, tags and metadata; the ledger, the
budgets, the metrics' counters and so the cost report, untouched. ``pruned_at`` shows on each.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from agents.models import AgentRun, AgentStep
from dlq.models import FailureRecord
from embeddings.models import EmbeddingChunk
from jobs.models import LlmJob
from pipelines.models import Pipeline, PipelineStep

__all__ = [
    "PruneReport",
    "prune_before",
    "prune_daily",
    "prunable_jobs",
    "prunable_pipelines",
    "prunable_runs",
]

logger = logging.getLogger(__name__)

BATCH = 500
DAILY_KEY = "llmops:retention:daily"
"""Held for a day by the monitor that pruned: one pass a day however many monitors run."""


@dataclass
class PruneReport:
    jobs: int = 0
    runs: int = 0
    pipelines: int = 0
    vectors: int = 0
    dry_run: bool = False

    def __str__(self) -> str:
        verb = "would prune" if self.dry_run else "pruned"
        return f"{verb} {self.jobs} jobs, {self.runs} agent runs, {self.pipelines} pipelines" + (
            "" if self.dry_run else f"; {self.vectors} vector chunks deleted"
        )


def prunable_jobs(before: datetime) -> QuerySet[LlmJob]:
    open_letters = FailureRecord.objects.filter(state=FailureRecord.State.OPEN).values("job_id")
    return (
        LlmJob.objects.filter(
            status__in=LlmJob.FINAL_STATUSES, completed_at__lt=before, pruned_at__isnull=True
        )
        .exclude(id__in=open_letters)
        .order_by()
    )


def prunable_runs(before: datetime) -> QuerySet[AgentRun]:
    return AgentRun.objects.filter(
        status__in=AgentRun.FINAL_STATUSES, finished_at__lt=before, pruned_at__isnull=True
    ).order_by()


def prunable_pipelines(before: datetime) -> QuerySet[Pipeline]:
    return Pipeline.objects.filter(
        status__in=Pipeline.FINAL_STATUSES, finished_at__lt=before, pruned_at__isnull=True
    ).order_by()


def prune_before(before: datetime, *, dry_run: bool = False) -> PruneReport:
    """Empty the content of everything final that ended before ``before``."""
    report = PruneReport(dry_run=dry_run)
    if dry_run:
        report.jobs = prunable_jobs(before).count()
        report.runs = prunable_runs(before).count()
        report.pipelines = prunable_pipelines(before).count()
        return report
    # Runs and pipelines first: their jobs are pruned with the rest below.
    report.runs = _in_batches(prunable_runs(before), _prune_runs)
    report.pipelines = _in_batches(prunable_pipelines(before), _prune_pipelines)
    vectors = [0]

    def prune_jobs(ids: list[Any]) -> None:
        vectors[0] += _prune_jobs(ids)

    report.jobs = _in_batches(prunable_jobs(before), prune_jobs)
    report.vectors = vectors[0]
    logger.info("retention: %s (before %s)", report, before.isoformat())
    return report


def _in_batches(queryset: QuerySet[Any], prune: Any) -> int:
    done = 0
    while True:
        ids = list(queryset.values_list("id", flat=True)[:BATCH])
        if not ids:
            return done
        with transaction.atomic():
            prune(ids)
        done += len(ids)


def _prune_jobs(ids: list[Any]) -> int:
    now = timezone.now()
    LlmJob.objects.filter(id__in=ids, pruned_at__isnull=True).update(
        messages=[],
        messages_ref=None,
        system=None,
        input=None,
        params={},
        output_text=None,
        output_content=None,
        pruned_at=now,
    )
    deleted, _ = EmbeddingChunk.objects.filter(job_id__in=ids).delete()
    return deleted


def _prune_runs(ids: list[Any]) -> None:
    AgentRun.objects.filter(id__in=ids, pruned_at__isnull=True).update(
        messages=[], system=None, output=None, pruned_at=timezone.now()
    )
    AgentStep.objects.filter(run_id__in=ids).update(input=None, output=None)


def _prune_pipelines(ids: list[Any]) -> None:
    Pipeline.objects.filter(id__in=ids, pruned_at__isnull=True).update(pruned_at=timezone.now())
    PipelineStep.objects.filter(pipeline_id__in=ids).update(request={})


def prune_daily() -> PruneReport | None:
    """The monitor's pass: with ``LLM_RETENTION_DAYS``, once a day over every monitor."""
    days = settings.LLM_RETENTION_DAYS
    if not days:
        return None
    from llmops.queues import LLM_QUEUE
    from runtime.redis_clients import queue_connection

    if not queue_connection(LLM_QUEUE).set(DAILY_KEY, "1", nx=True, ex=24 * 3600):
        return None
    return prune_before(timezone.now() - timedelta(days=days))
