"""The agent runs' part of the reconciler's pass (loops/management/commands/reconcile_jobs.py):
the database is the source of truth, Redis only carries the tool task.

Each pass, in bounded batches:
- a tool call still ``running`` a stale interval past its lease (its worker was killed) goes
  back to ``pending``, to run again with the same ``call_id``;
- a running run with pending calls whose tool task is gone (Redis flushed, never pushed) or
  died with its worker gets its task enqueued again;
- a running run whose calls are all completed but whose next turn was never submitted (its
  task died between the last record and the submit) is advanced;
- a run waiting for an approval longer than ``LLM_AGENT_APPROVAL_TIMEOUT_SECONDS`` fails with
  ``approval_timeout``.
A turn's job is the jobs reconciler's, like any job.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta

import django_rq
from django.conf import settings
from django.db import transaction
from django.db.models import Max, OuterRef, Subquery
from django.utils import timezone

from agents.enqueue import agent_tools_enqueue
from agents.models import AgentRun, AgentStep
from agents.services import agent_run_advance, fail_run
from llmops.queues import AGENTS_QUEUE
from runtime.rq_jobs import rq_job_is_alive, rq_jobs_abandoned, rq_jobs_fetch

__all__ = ["AgentSweepReport", "agent_runs_resume"]

logger = logging.getLogger(__name__)

BATCH = 200


@dataclass
class AgentSweepReport:
    calls_taken_back: int = 0
    tasks_enqueued: int = 0
    runs_advanced: int = 0
    approvals_timed_out: int = 0

    @property
    def changed(self) -> bool:
        return any(self.__dict__.values())

    def __str__(self) -> str:
        return (
            f"agent runs: {self.calls_taken_back} lost tool calls taken back, "
            f"{self.tasks_enqueued} tool tasks enqueued again, {self.runs_advanced} advanced, "
            f"{self.approvals_timed_out} approvals timed out"
        )


def _take_back_lapsed_calls(report: AgentSweepReport) -> None:
    stale_before = timezone.now() - timedelta(seconds=settings.LLM_STALE_AFTER_SECONDS)
    lapsed = list(
        AgentStep.objects.filter(
            kind=AgentStep.Kind.TOOL,
            status=AgentStep.Status.RUNNING,
            lease_until__lt=stale_before,
        ).values_list("id", "attempts", "run_id")[:BATCH]
    )
    for step_id, attempts, run_id in lapsed:
        if AgentStep.objects.filter(
            id=step_id, status=AgentStep.Status.RUNNING, attempts=attempts
        ).update(status=AgentStep.Status.PENDING, lease_until=None):
            report.calls_taken_back += 1
            logger.warning(
                "agent run %s: tool call %s lost its worker mid-call; it runs again",
                run_id,
                step_id,
                extra={"agent_run_id": str(run_id)},
            )


def _enqueue_lost_tasks(report: AgentSweepReport) -> None:
    grace_before = timezone.now() - timedelta(seconds=settings.LLM_LOST_QUEUE_GRACE_SECONDS)
    stale_before = timezone.now() - timedelta(seconds=settings.LLM_STALE_AFTER_SECONDS)
    runs = list(
        AgentRun.objects.filter(
            status=AgentRun.Status.RUNNING,
            steps__kind=AgentStep.Kind.TOOL,
            steps__status=AgentStep.Status.PENDING,
        )
        .exclude(tools_enqueued_at__gte=grace_before)
        .distinct()
        .values_list("id", "tools_rq_job_id")[:BATCH]
    )
    if not runs:
        return
    queue = django_rq.get_queue(AGENTS_QUEUE)
    rq_jobs = rq_jobs_fetch(queue=queue, job_ids=[rq_job_id for _, rq_job_id in runs])
    abandoned = rq_jobs_abandoned(queue=queue, jobs=rq_jobs, stale_before=stale_before)
    for (run_id, _), rq_job, dead in zip(runs, rq_jobs, abandoned, strict=True):
        if rq_job_is_alive(rq_job) and not dead:
            continue
        if agent_tools_enqueue(run_id=run_id):
            report.tasks_enqueued += 1
            logger.warning("agent run %s: its tool task was lost; enqueued again", run_id)


def _advance_stranded(report: AgentSweepReport) -> None:
    """Running runs whose last step is a completed tool call: the task died before the next
    turn was submitted (agent_run_advance does nothing for any other run)."""
    grace_before = timezone.now() - timedelta(seconds=settings.LLM_LOST_QUEUE_GRACE_SECONDS)
    last_index = (
        AgentStep.objects.filter(run_id=OuterRef("id"))
        .values("run_id")
        .annotate(last=Max("index"))
        .values("last")
    )
    candidates = list(
        AgentRun.objects.filter(status=AgentRun.Status.RUNNING, updated_at__lt=grace_before)
        .annotate(last_index=Subquery(last_index))
        .values_list("id", "last_index")[:BATCH]
    )
    for run_id, index in candidates:
        last = AgentStep.objects.filter(run_id=run_id, index=index).only("kind", "status").first()
        if last is None or last.kind != AgentStep.Kind.TOOL:
            continue
        if last.status == AgentStep.Status.COMPLETED and agent_run_advance(run_id=run_id):
            report.runs_advanced += 1
            logger.warning("agent run %s: its next turn was never submitted; submitted", run_id)


def _time_out_approvals(report: AgentSweepReport) -> None:
    cutoff = timezone.now() - timedelta(seconds=settings.LLM_AGENT_APPROVAL_TIMEOUT_SECONDS)
    ids = list(
        AgentRun.objects.filter(
            status=AgentRun.Status.WAITING_APPROVAL, waiting_since__lt=cutoff
        ).values_list("id", flat=True)[:BATCH]
    )
    for run_id in ids:
        with transaction.atomic():
            run = AgentRun.objects.select_for_update().get(id=run_id)
            if run.status != AgentRun.Status.WAITING_APPROVAL or not run.waiting_since:
                continue
            if run.waiting_since >= cutoff:
                continue
            fail_run(
                run,
                code="approval_timeout",
                message=(
                    f"No decision on its tool call within "
                    f"{settings.LLM_AGENT_APPROVAL_TIMEOUT_SECONDS:g} s."
                ),
            )
            report.approvals_timed_out += 1


def agent_runs_resume() -> AgentSweepReport:
    report = AgentSweepReport()
    _take_back_lapsed_calls(report)
    _enqueue_lost_tasks(report)
    _advance_stranded(report)
    _time_out_approvals(report)
    return report
