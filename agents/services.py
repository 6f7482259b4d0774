"""Every write on an agent run (its creation: agents/creation.py; cancel, approve or reject:
agents/control.py), the tool calls, and what each transition of a turn's job does.

    create                   -> queued, turn 1's job submitted    agent_run_create (creation)
    turn job claimed         queued -> running                                (job transition)
    turn job completed       tool_use: tool steps (pending | waiting_approval)
                             and their task; otherwise -> completed           (job transition)
    tool steps all completed next turn's job submitted                       agent_run_advance
    turn job dead-lettered   -> failed; its requeue from the DLQ resumes it   (job transition)
    turn job cancelled       -> cancelled                                     (job transition)
    approve / reject         waiting_approval -> running                      agent_step_decide
    cancel                   -> cancelled                                     agent_run_cancel

(job transition): ``agent_run_job_transition``, run inside the transaction of the job's own
transition (jobs/transitions.py, ``in_transaction=True``), as pipelines do: a turn's answer, the
tool steps it asks for and the next turn's job commit with the job's completion or not at all.
Locks are always taken job first, run second, steps last.
"""

import logging
import uuid
from collections.abc import Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from agents import events
from agents.approval_alerts import approval_alert
from agents.enqueue import agent_tools_job_new, agent_tools_push
from agents.models import AgentRun, AgentStep
from agents.representation import agent_run_representation
from agents.tools import AgentTool, ToolOutcome, registered_tool
from agents.transcript import turn_messages, turn_messages_ref
from agents.validation import MARKER_KEY
from api.errors import ApplicationError, ValidationFailed
from jobs.deadlines import deadline_passed
from jobs.models import LlmJob
from jobs.services import job_submit
from jobs.transitions import Transition
from ledger.pricing import upper_bound_cost
from ledger.selectors import price_for_model
from ledger.services import cost_entry_record_tool_call
from tracing.context import parse_traceparent, trace_parent_bound
from tracing.export import export_run_trace
from webhooks.models import Subject
from webhooks.services import webhook_record_subscribed

__all__ = [
    "agent_run_advance",
    "agent_run_job_transition",
    "agent_step_claim",
    "agent_step_record",
    "agent_step_record_and_advance",
    "agent_tool_price_refusal",
    "agent_tools_enqueue_on_commit",
    "fail_run",
]

logger = logging.getLogger(__name__)

_WATCHED = frozenset(
    {
        Transition.CLAIMED,
        Transition.COMPLETED,
        Transition.DEAD_LETTERED,
        Transition.RECOVERED,
        Transition.CANCELLED,
        Transition.REQUEUED,
    }
)
"""The transitions that move a run; submits and scheduled retries never do."""


# --- Turns --------------------------------------------------------------------------------------


def _turn_body(run: AgentRun, steps: Sequence[AgentStep]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "feature": run.feature,
        "model": run.model,
        "max_tokens": run.max_tokens,
        "messages": turn_messages(messages=run.messages, steps=steps),
        "metadata": {**run.metadata, MARKER_KEY: {"id": str(run.id), "turn": run.turns + 1}},
    }
    if run.system is not None:
        body["system"] = run.system
    if run.deadline is not None:
        body["deadline"] = run.deadline.isoformat()
    if run.tags:
        body["tags"] = run.tags
    if run.priority:
        body["priority"] = run.priority
    definitions = [tool.definition() for name in run.tools if (tool := registered_tool(name))]
    if definitions:
        body["tools"] = definitions
    return body


def _worst_case(run: AgentRun, body: dict[str, Any]) -> Decimal:
    """What the turn can cost at most: the ledger's upper bound, as a budget reservation holds."""
    price = price_for_model(model=run.model)
    if price is None:
        return Decimal(0)
    return upper_bound_cost(
        price,
        messages=body["messages"],
        system=body.get("system"),
        max_tokens=run.max_tokens,
        tools=body.get("tools"),
    )


def _submit_turn(
    run: AgentRun, *, steps: Sequence[AgentStep], user: User | None = None, refuse: bool = False
) -> None:
    """Submit the next turn's job and its model step, unless a limit stops the run. With
    ``refuse`` (the first turn, at create) a refusal raises instead, so nothing is written."""
    if run.turns >= run.max_turns:
        _fail(run, "max_turns_exceeded", f"The run reached max_turns ({run.max_turns}).")
        return
    if deadline_passed(run.deadline):
        _fail(
            run,
            "deadline_exceeded",
            f"Turn {run.turns + 1} was not sent: the run's deadline passed.",
        )
        return
    body = _turn_body(run, steps)
    worst = _worst_case(run, body)
    if run.max_cost_usd is not None and run.cost_usd + worst > run.max_cost_usd:
        message = (
            f"Turn {run.turns + 1} could cost up to ${worst} and the run has spent "
            f"${run.cost_usd} of its max_cost_usd ${run.max_cost_usd}: not sent."
        )
        if refuse:
            raise ValidationFailed(
                message, code="max_cost_exceeded", detail={"field": "max_cost_usd"}
            )
        _fail(run, "max_cost_exceeded", message)
        return
    # The job needs its owner's id alone (its row, its budgets): no read of the user's row.
    owner = user or User(id=run.user_id)
    index = max((s.index for s in steps), default=-1) + 1
    # The job stores where its transcript is, not the transcript: stored per turn, a run's
    # transcripts grew as the square of its length (jobs/message_refs.py).
    ref = turn_messages_ref(run=run, before_step=index, messages=body["messages"])
    try:
        # The turn's job is a child of the run's span (tracing/context.py).
        with trace_parent_bound(parse_traceparent(run.traceparent)):
            job, _created = job_submit(
                user=owner,
                data=body,
                messages_ref=ref,
                api_key_id=run.api_key_id,
                # The turn carries what the run has left: no attempt of it (a retry, a fallback to
                # a pricier model) starts whose worst case does not fit (ledger/budgets.py).
                max_cost_usd=None if run.max_cost_usd is None else run.max_cost_usd - run.cost_usd,
            )
    except ApplicationError as exc:
        if refuse:
            raise
        _fail(run, exc.code, f"Turn {run.turns + 1} was refused: {exc.message}")
        return
    run.turns += 1
    step = AgentStep.objects.create(
        run=run,
        index=index,
        turn=run.turns,
        kind=AgentStep.Kind.MODEL,
        status=AgentStep.Status.RUNNING,
        job=job,
    )
    if run.status != AgentRun.Status.QUEUED:
        run.status = AgentRun.Status.RUNNING
    run.save(update_fields=["turns", "status", "updated_at"])
    events.publish_step_on_commit(run, step)
    events.publish_run_on_commit(run)  # its turns (and, from turn 2, its cost) changed


def fail_run(run: AgentRun, *, code: str, message: str) -> None:
    """End a locked run ``failed`` with this error (the sweep's approval timeout)."""
    _fail(run, code, message)


def _fail(run: AgentRun, code: str, message: str) -> None:
    _finish(run, AgentRun.Status.FAILED, code=code, message=message)
    logger.warning(
        "agent run %s failed: %s: %s",
        run.id,
        code,
        message,
        extra={"agent_run_id": str(run.id), "error_code": code},
    )


def _finish(run: AgentRun, status: str, *, code: str = "", message: str = "") -> None:
    run.status = status
    run.error_code, run.error_message = code, message[:2000]
    run.finished_at = timezone.now()
    run.waiting_since = None
    run.save(
        update_fields=[
            "status",
            "error_code",
            "error_message",
            "finished_at",
            "waiting_since",
            "output",
            "cost_usd",
            "updated_at",
        ]
    )
    waiting = [AgentStep.Status.PENDING, AgentStep.Status.WAITING_APPROVAL]
    # Read, then written by id: an UPDATE by run and status went through the status index and
    # locked every run's pending calls, deadlocking with other runs' claims. The run's lock
    # keeps its calls from being added or claimed meanwhile.
    ids = list(
        AgentStep.objects.filter(run=run, kind=AgentStep.Kind.TOOL, status__in=waiting).values_list(
            "id", flat=True
        )
    )
    stopped = (
        AgentStep.objects.filter(id__in=ids, status__in=waiting).update(
            status=AgentStep.Status.CANCELLED, finished_at=run.finished_at
        )
        if ids
        else 0
    )
    if stopped:
        logger.info("agent run %s: %s waiting tool calls cancelled", run.id, stopped)
    events.publish_run_on_commit(run)
    # Its trace, once the finish has committed (tracing/export.py; nothing when tracing is off).
    transaction.on_commit(lambda: export_run_trace(run))
    # With the finish or not at all: its webhook, if the run has a callback URL.
    webhook_record_subscribed(
        subject_kind=Subject.AGENT_RUN,
        subject_id=run.id,
        event=f"agent_run.{status}",
        payload=lambda: {
            "type": f"agent_run.{status}",
            # Read again in the transaction: what the API would answer once it commits.
            "agent_run": agent_run_representation(AgentRun.objects.get(id=run.id)),
        },
    )


def _steps(run: AgentRun) -> list[AgentStep]:
    return list(AgentStep.objects.filter(run=run).order_by("index"))


def _cost(run: AgentRun) -> Decimal:
    total = LlmJob.objects.filter(agent_step__run_id=run.id).aggregate(total=Sum("cost_usd"))
    return total["total"] or Decimal(0)


# --- The transitions of a turn's job ------------------------------------------------------------


def _in_a_run(job: LlmJob) -> bool:
    """The marker in the job's metadata, tested without a query (only a hint: the step's row
    decides). A caller that left the column unread gets the lookup."""
    if "metadata" not in job.__dict__:
        return True
    metadata = job.metadata
    return isinstance(metadata, dict) and MARKER_KEY in metadata


def agent_run_job_transition(job: LlmJob, transition: Transition) -> None:
    """Move the job's run, inside the job's transition (registered in apps.py)."""
    if transition not in _WATCHED or not _in_a_run(job):
        return
    if transition == Transition.RECOVERED and job.status != LlmJob.Status.FAILED:
        return  # recovered into a retry: the turn is still on its way
    if transition == Transition.CLAIMED:
        _turn_claimed(job)
        return
    step = AgentStep.objects.filter(job_id=job.id).first()
    if step is None:
        return
    run = AgentRun.objects.select_for_update().get(id=step.run_id)
    now = timezone.now()
    run.cost_usd = _cost(run)
    if transition == Transition.COMPLETED:
        _turn_completed(run, step, job)
    elif transition == Transition.REQUEUED:
        step.status, step.finished_at = AgentStep.Status.RUNNING, None
        step.save(update_fields=["status", "finished_at"])
        if run.status == AgentRun.Status.FAILED:
            run.status = AgentRun.Status.RUNNING
            run.error_code, run.error_message, run.finished_at = "", "", None
            run.save(
                update_fields=["status", "error_code", "error_message", "finished_at", "updated_at"]
            )
            logger.info("agent run %s resumes: turn %s requeued", run.id, step.turn)
            events.publish_run_on_commit(run)
    else:
        cancelled = transition == Transition.CANCELLED
        step.status = AgentStep.Status.CANCELLED if cancelled else AgentStep.Status.FAILED
        step.finished_at = now
        step.save(update_fields=["status", "finished_at"])
        events.publish_step_on_commit(run, step)
        if run.status in AgentRun.ACTIVE_STATUSES:
            if cancelled:
                _finish(run, AgentRun.Status.CANCELLED, code="cancelled", message="Turn cancelled.")
            else:
                _fail(run, job.error_code or "turn_failed", job.error_message or "Turn failed.")
        else:
            run.save(update_fields=["cost_usd", "updated_at"])


def _turn_claimed(job: LlmJob) -> None:
    """A turn's job claimed: its step started, and the run running if this is its first turn.

    Neither the step nor the run is read whole (the run's row holds its first messages and
    tools, decoded at every read). A queued run is moved by a conditional UPDATE, which locks
    it before the step, in the module's order; a running run is left unlocked (READ COMMITTED
    keeps no lock on a row the UPDATE did not match): the step's ``started_at`` is all this
    writes then, and a cancel that holds the run waits for nothing of this transaction but
    the job's and the step's rows, which it takes in the same order."""
    found = (
        AgentStep.objects.filter(job_id=job.id).values_list("id", "run_id", "started_at").first()
    )
    if found is None:
        return
    step_id, run_id, started_at = found
    now = timezone.now()
    queued = AgentRun.objects.filter(id=run_id, status=AgentRun.Status.QUEUED)
    if queued.update(status=AgentRun.Status.RUNNING, updated_at=now):
        events.publish_run_on_commit(AgentRun.objects.get(id=run_id))
    if started_at is None:
        AgentStep.objects.filter(id=step_id).update(started_at=now)


def _turn_completed(run: AgentRun, step: AgentStep, job: LlmJob) -> None:
    content = job.output_content or [{"type": "text", "text": job.output_text or ""}]
    step.status = AgentStep.Status.COMPLETED
    step.output = content
    step.finished_at = timezone.now()
    step.save(update_fields=["status", "output", "finished_at"])
    events.publish_step_on_commit(run, step)
    if run.status not in (AgentRun.Status.QUEUED, AgentRun.Status.RUNNING):
        # Cancelled (or failed) while the turn ran: its answer is recorded, nothing follows.
        run.save(update_fields=["cost_usd", "updated_at"])
        return
    calls = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
    if job.stop_reason != "tool_use" or not calls:
        run.status = AgentRun.Status.COMPLETED
        run.output = {"text": job.output_text or "", "content": content}
        _finish(run, AgentRun.Status.COMPLETED)
        logger.info("agent run %s completed in %s turns", run.id, run.turns)
        return
    if run.turns >= run.max_turns:
        # The results could never go back: no tool runs for nothing.
        _fail(run, "max_turns_exceeded", f"The run reached max_turns ({run.max_turns}).")
        return
    now = timezone.now()
    tool_steps = []
    for offset, call in enumerate(calls, start=1):
        name = str(call.get("name", ""))
        tool = registered_tool(name) if name in run.tools else None
        tool_step = AgentStep(
            run=run,
            index=step.index + offset,
            turn=step.turn,
            kind=AgentStep.Kind.TOOL,
            name=name[:64],
            call_id=str(call.get("id", ""))[:128],
            input=call.get("input"),
            status=AgentStep.Status.PENDING,
        )
        if tool is None:
            tool_step.status = AgentStep.Status.COMPLETED
            tool_step.output, tool_step.is_error = f"Unknown tool: {name}", True
            tool_step.started_at = tool_step.finished_at = now
        elif tool.requires_approval:
            tool_step.status = AgentStep.Status.WAITING_APPROVAL
        tool_steps.append(tool_step)
    AgentStep.objects.bulk_create(tool_steps)
    for tool_step in tool_steps:
        events.publish_step_on_commit(run, tool_step)
    statuses = {s.status for s in tool_steps}
    if AgentStep.Status.WAITING_APPROVAL in statuses:
        run.status = AgentRun.Status.WAITING_APPROVAL
        run.waiting_since = now
        run.save(update_fields=["status", "waiting_since", "cost_usd", "updated_at"])
        events.publish_run_on_commit(run)
        approval_alert(run, [s for s in tool_steps if s.status == s.Status.WAITING_APPROVAL])
    elif AgentStep.Status.PENDING in statuses:
        pending = [s.name for s in tool_steps if s.status == AgentStep.Status.PENDING]
        agent_tools_enqueue_on_commit(run, tool_names=pending)
        run.save(update_fields=["cost_usd", "tools_enqueued_at", "tools_rq_job_id", "updated_at"])
        events.publish_run_on_commit(run)  # its cost changed
    else:
        run.save(update_fields=["cost_usd", "updated_at"])
        _submit_turn(run, steps=_steps(run))


# --- Tool calls ---------------------------------------------------------------------------------


def agent_tools_enqueue_on_commit(run: AgentRun, *, tool_names: Sequence[str]) -> None:
    """Name the run's next tool task (``tools_rq_job_id`` and ``tools_enqueued_at``, set on
    ``run`` for the caller's save, in its transaction) and put it on the agents queue once the
    transaction commits. Redis being down never fails the caller: the reconciler's sweep
    enqueues it again (agents/sweep.py)."""
    run.tools_rq_job_id = rq_job_id = agent_tools_job_new(run.id)
    run.tools_enqueued_at = timezone.now()
    run_id, names = run.id, list(tool_names)

    def push() -> None:
        events.events_sent()  # the calls' "pending" out before a worker's "running"
        agent_tools_push(run_id=run_id, rq_job_id=rq_job_id, tool_names=names)

    transaction.on_commit(push, robust=True)


def agent_step_claim(
    *, step_id: int, lease_seconds: float, run_id: uuid.UUID | None = None
) -> AgentStep | None:
    """pending -> running for one tool call, only while its run is running: one conditional
    UPDATE, exactly one winner. Returns the claimed step, or None. ``run_id``: the step's run,
    when the caller knows it (no read of the step first)."""
    with transaction.atomic():
        if run_id is None:
            run_id = AgentStep.objects.filter(id=step_id).values_list("run_id", flat=True).first()
            if run_id is None:
                return None
        run = (
            AgentRun.objects.select_for_update()
            .only("id", "status", "user_id")  # what the claim and its event read
            .filter(id=run_id)
            .first()
        )
        if run is None or run.status != AgentRun.Status.RUNNING:
            return None
        now = timezone.now()
        if not AgentStep.objects.filter(id=step_id, status=AgentStep.Status.PENDING).update(
            status=AgentStep.Status.RUNNING,
            attempts=F("attempts") + 1,
            started_at=now,
            lease_until=now + timedelta(seconds=lease_seconds),
        ):
            return None
        claimed = AgentStep.objects.get(id=step_id)
        events.publish_step_on_commit(run, claimed)
        return claimed


def agent_tool_price_refusal(*, step: AgentStep, price_usd: Decimal) -> str | None:
    """Why a priced tool call may not start: its price would take the run past its
    ``max_cost_usd`` (None: it may)."""
    run = AgentRun.objects.only("id", "max_cost_usd").get(id=step.run_id)
    if run.max_cost_usd is None:
        return None
    spent = _cost(run)
    if spent + price_usd <= run.max_cost_usd:
        return None
    return (
        f"Not called: {step.name} costs ${price_usd} a call and the run has spent ${spent} of "
        f"its max_cost_usd ${run.max_cost_usd}."
    )


@transaction.atomic
def agent_step_record(
    *, step_id: int, attempt: int, outcome: ToolOutcome, tool: AgentTool | None = None
) -> bool:
    """running -> completed with the call's result, only for the attempt that ran: a call the
    sweep took back meanwhile (lease lapsed) is recorded by its next attempt instead. A priced
    tool's call that reached it is booked in the ledger with the record, once."""
    turn_job = _turn_job_locked(step_id, outcome=outcome, tool=tool)
    return _record(step_id, attempt=attempt, outcome=outcome, tool=tool, turn_job=turn_job)


@transaction.atomic
def agent_step_record_and_advance(
    *, step: AgentStep, outcome: ToolOutcome, tool: AgentTool | None = None
) -> tuple[bool, bool]:
    """``agent_step_record`` of a claimed ``step`` and then ``agent_run_advance`` of its run, in
    one transaction (a turn's only call: one commit, not two). Returns (recorded, advanced)."""
    turn_job = _turn_job_locked(step.id, outcome=outcome, tool=tool)
    # Job first, run second, steps last: the run is locked before the step's row is written.
    run = AgentRun.objects.select_for_update().filter(id=step.run_id).first()
    recorded = _record(
        step.id,
        attempt=step.attempts,
        outcome=outcome,
        tool=tool,
        turn_job=turn_job,
        run=run,
        claimed=step,
    )
    if run is None:
        return recorded, False
    try:
        # A savepoint: whatever stops the submit, the call's record commits (a completed call
        # never runs again), and the sweep submits the turn (agents/sweep.py).
        with transaction.atomic():
            return recorded, _advance(run)
    except Exception:
        logger.exception("agent run %s: the next turn was not submitted", run.id)
        return recorded, False


def _turn_job_locked(
    step_id: int, *, outcome: ToolOutcome, tool: AgentTool | None
) -> LlmJob | None:
    """The turn's job, locked, when the call is to be booked (a priced tool that was called)."""
    if tool is None or not tool.price_usd or not outcome.billable:
        return None
    # Job first (its priced calls are numbered under its lock), steps last.
    step = AgentStep.objects.only("run_id", "turn").get(id=step_id)
    return (
        LlmJob.objects.select_for_update()
        .filter(agent_step__run_id=step.run_id, agent_step__turn=step.turn)
        .first()
    )


def _record(
    step_id: int,
    *,
    attempt: int,
    outcome: ToolOutcome,
    tool: AgentTool | None,
    turn_job: LlmJob | None,
    run: AgentRun | None = None,
    claimed: AgentStep | None = None,
) -> bool:
    """The record's UPDATE, its booking and its event; ``run`` and ``claimed`` (the step as
    its claim read it) when the caller has them, else they are read."""
    now = timezone.now()
    recorded = AgentStep.objects.filter(
        id=step_id, status=AgentStep.Status.RUNNING, attempts=attempt
    ).update(
        status=AgentStep.Status.COMPLETED,
        output=outcome.output,
        is_error=outcome.is_error,
        finished_at=now,
        lease_until=None,
    )
    if recorded:
        if claimed is not None and run is not None:
            step = claimed  # what the UPDATE wrote, without reading it back
            step.status, step.output, step.is_error = (
                AgentStep.Status.COMPLETED,
                outcome.output,
                outcome.is_error,
            )
            step.finished_at, step.lease_until = now, None
        else:
            step = AgentStep.objects.select_related("run").get(id=step_id)
            run = step.run
        if turn_job is not None and tool is not None and tool.price_usd:
            cost_entry_record_tool_call(
                job=turn_job,
                call_id=step.call_id,
                tool=tool.name,
                source=tool.source,
                price_usd=tool.price_usd,
                is_error=outcome.is_error,
            )
        events.publish_step_on_commit(run, step)
    return bool(recorded)


@transaction.atomic
def agent_run_advance(*, run_id: uuid.UUID) -> bool:
    """Once every tool call of the current turn is completed, submit the next turn (or stop at
    a limit). Safe to call any number of times: the run's lock and its last step decide."""
    run = AgentRun.objects.select_for_update().filter(id=run_id).first()
    return run is not None and _advance(run)


def _advance(run: AgentRun) -> bool:
    if run.status != AgentRun.Status.RUNNING:
        return False
    steps = _steps(run)
    if not steps or steps[-1].kind != AgentStep.Kind.TOOL:
        return False  # a model turn is under way
    current = [s for s in steps if s.turn == steps[-1].turn and s.kind == AgentStep.Kind.TOOL]
    if any(s.status != AgentStep.Status.COMPLETED for s in current):
        return False
    run.cost_usd = _cost(run)
    _submit_turn(run, steps=steps)
    return True
