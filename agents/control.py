"""A person's hand on an agent run: approving or refusing a tool call that waits for one, and
cancelling the run (the API and the admin call these; agents/services.py runs the rest)."""

import logging
import uuid

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agents import events
from agents.models import AgentRun, AgentStep
from agents.services import _cost, _finish, _steps, _submit_turn, agent_tools_enqueue_on_commit
from api.errors import Conflict, NotFound
from jobs.models import LlmJob
from jobs.services import job_cancel

__all__ = ["agent_run_cancel", "agent_step_decide"]

logger = logging.getLogger(__name__)


@transaction.atomic
def agent_step_decide(
    *, run: AgentRun, call_id: str, approve: bool, reason: str, user: User
) -> AgentRun:
    """Approve (the tool runs) or reject (the model gets an error result with the reason) one
    waiting tool call. Once no call waits, the run goes on."""
    locked = AgentRun.objects.select_for_update().get(id=run.id)
    step = AgentStep.objects.filter(run=locked, call_id=call_id, kind=AgentStep.Kind.TOOL).first()
    if step is None:
        raise NotFound("No such tool call in this run.", code="call_not_found")
    if step.status != AgentStep.Status.WAITING_APPROVAL or (
        locked.status != AgentRun.Status.WAITING_APPROVAL
    ):
        raise Conflict(
            f"This call is {step.status}; the run is {locked.status}.",
            code="not_waiting_approval",
            detail={"status": step.status, "run_status": locked.status},
        )
    now = timezone.now()
    step.approved_by = user
    step.decision_reason = reason[:2000]
    if approve:
        step.status = AgentStep.Status.PENDING
    else:
        step.status = AgentStep.Status.COMPLETED
        step.is_error = True
        step.output = f"Rejected by a reviewer: {reason}" if reason else "Rejected by a reviewer."
        step.started_at = step.finished_at = now
    step.save(
        update_fields=[
            "status",
            "approved_by",
            "decision_reason",
            "is_error",
            "output",
            "started_at",
            "finished_at",
        ]
    )
    events.publish_step_on_commit(locked, step)
    logger.info(
        "agent run %s: call %s (%s) %s by %s",
        locked.id,
        call_id,
        step.name,
        "approved" if approve else "rejected",
        user.username,
        extra={"agent_run_id": str(locked.id)},
    )
    steps = _steps(locked)
    if any(s.status == AgentStep.Status.WAITING_APPROVAL for s in steps):
        return locked
    locked.status = AgentRun.Status.RUNNING
    locked.waiting_since = None
    pending = [s.name for s in steps if s.status == AgentStep.Status.PENDING]
    if pending:
        agent_tools_enqueue_on_commit(locked, tool_names=pending)
        locked.save(
            update_fields=[
                "status",
                "waiting_since",
                "tools_enqueued_at",
                "tools_rq_job_id",
                "updated_at",
            ]
        )
        events.publish_run_on_commit(locked)
    else:
        locked.save(update_fields=["status", "waiting_since", "updated_at"])
        events.publish_run_on_commit(locked)
        locked.cost_usd = _cost(locked)
        _submit_turn(locked, steps=steps)
    return locked


def _current_job(run_id: uuid.UUID) -> LlmJob | None:
    step = (
        AgentStep.objects.filter(run_id=run_id, kind=AgentStep.Kind.MODEL)
        .select_related("job")
        .order_by("-index")
        .first()
    )
    return step.job if step is not None else None


def agent_run_cancel(*, run: AgentRun) -> AgentRun:
    """Cancel a run that has not ended: its turn's job is cancelled (a running one stops, as a
    job's cancel does: its worker closes the stream and books what streamed), waiting tool
    calls are cancelled and no further step starts. A tool call already running ends and is
    recorded. A completed or cancelled run answers ``409 not_cancellable``."""
    if run.status in AgentRun.FINAL_STATUSES:
        raise _not_cancellable(run)
    job = _current_job(run.id)
    if job is not None and job.status in (*LlmJob.WAITING_STATUSES, LlmJob.Status.RUNNING):
        try:
            # Job first (its lock), then the run: as a job's transitions take them.
            job_cancel(job=job, running=True)
        except Conflict:
            pass  # it ended meanwhile
    with transaction.atomic():
        locked = AgentRun.objects.select_for_update().get(id=run.id)
        if locked.status == AgentRun.Status.CANCELLED:
            return locked
        if locked.status == AgentRun.Status.COMPLETED:
            raise _not_cancellable(locked)
        locked.cost_usd = _cost(locked)
        _finish(locked, AgentRun.Status.CANCELLED, code="cancelled", message="Cancelled.")
        logger.info("agent run %s cancelled", locked.id, extra={"agent_run_id": str(locked.id)})
        return locked


def _not_cancellable(run: AgentRun) -> Conflict:
    return Conflict(
        f"A {run.status} agent run cannot be cancelled.",
        code="not_cancellable",
        detail={"status": run.status},
    )
