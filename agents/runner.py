"""Running the tool calls of a run's current turn: a few at once, each claimed, called and
recorded on its own, then the next turn.

Each call is claimed ``pending -> running`` by a conditional UPDATE (exactly one winner), then
called outside any transaction (in a child process of its own, killed at the tool's timeout:
agents/tool_processes.py), then recorded ``running -> completed`` for the attempt that claimed
it, so every result is committed before anything further starts; a call stopped at its timeout
is recorded like any other, with its error, and never runs again. A call whose worker
died mid-call keeps ``running`` until its lease (the tool's timeout, plus a margin) has lapsed;
the reconciler's sweep (agents/sweep.py) then puts it back to ``pending`` and it runs again
with the same ``call_id``: at least once for an interrupted call, exactly once for a completed
one.
"""

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connections

from agents.enqueue import DEFAULT_TIMEOUT, LEASE_MARGIN_SECONDS
from agents.models import AgentRun, AgentStep
from agents.services import (
    agent_run_advance,
    agent_step_claim,
    agent_step_record,
    agent_step_record_and_advance,
    agent_tool_price_refusal,
)
from agents.tools import ToolOutcome, registered_tool, tool_call
from ledger.config_cache import config_pinned, config_recheck
from runtime.db_connections import release_connection

__all__ = ["agent_tools_run"]

logger = logging.getLogger(__name__)


def _run_one(
    step_id: int,
    name: str | None = None,
    *,
    run_id: uuid.UUID | None = None,
    advance: bool = False,
) -> tuple[bool, bool]:
    """Claim, call and record one tool call: (recorded, next turn submitted); (False, False)
    when another copy has it (or had it). ``name`` and ``run_id``: the step's, when the caller
    read them. ``advance``: the turn's only call, recorded with the next turn's submit."""
    if name is None:
        name = AgentStep.objects.filter(id=step_id).values_list("name", flat=True).first()
    tool = registered_tool(name or "")
    timeout = tool.timeout if tool else DEFAULT_TIMEOUT
    step = agent_step_claim(
        step_id=step_id, lease_seconds=timeout + LEASE_MARGIN_SECONDS, run_id=run_id
    )
    if step is None:
        return False, False
    refusal = (
        agent_tool_price_refusal(step=step, price_usd=tool.price_usd)
        if (tool and tool.price_usd)
        else None
    )
    release_connection()  # none held while the tool runs (a threaded worker's slots)
    if refusal:
        outcome = ToolOutcome(refusal, True, billable=False)
    else:
        outcome = tool_call(name=step.name, tool_input=step.input, call_id=step.call_id)
        config_recheck()  # a change made during the call is seen by the next turn's submit
    advanced = False
    if advance:
        recorded, advanced = agent_step_record_and_advance(step=step, outcome=outcome, tool=tool)
    else:
        recorded = agent_step_record(
            step_id=step.id, attempt=step.attempts, outcome=outcome, tool=tool
        )
    ended = "failed" if outcome.is_error else "completed"
    logger.log(
        logging.WARNING if outcome.stopped else logging.INFO,
        "agent run %s: tool %s (%s) %s%s",
        step.run_id,
        step.name,
        step.call_id,
        "stopped at its timeout" if outcome.stopped else ended,
        "" if recorded else " (not recorded: its lease had lapsed)",
        extra={"agent_run_id": str(step.run_id)},
    )
    return recorded, advanced


def _run_one_in_pool(step: tuple[int, str]) -> bool:
    try:
        return _run_one(*step)[0]
    finally:
        connections.close_all()  # this thread's own connection


def agent_tools_run(*, run_id: uuid.UUID) -> str:
    """Run every pending tool call of the run, up to ``LLM_AGENT_TOOL_CONCURRENCY`` at once,
    then submit the next turn once all of the turn's calls are completed."""
    # Prices and budgets checked once for the next turn's submit (ledger/config_cache.py).
    with config_pinned():
        return _tools_run(run_id)


def _tools_run(run_id: uuid.UUID) -> str:
    pending = list(
        AgentStep.objects.filter(
            run_id=run_id,
            run__status=AgentRun.Status.RUNNING,
            kind=AgentStep.Kind.TOOL,
            status=AgentStep.Status.PENDING,
        )
        .order_by("index")
        .values_list("id", "name")
    )
    if (
        not pending
        and not AgentRun.objects.filter(id=run_id, status=AgentRun.Status.RUNNING).exists()
    ):
        return "skipped: the run is not running"
    release_connection()  # the calls' threads take their own: this one waits holding none
    ran = 0
    if len(pending) == 1:
        # One call (no thread, no second connection): recorded with the next turn's submit.
        recorded, advanced = _run_one(*pending[0], run_id=run_id, advance=True)
        if recorded:
            return _summary(1, advanced)
    elif pending:
        workers = min(settings.LLM_AGENT_TOOL_CONCURRENCY, len(pending))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agent-tool") as pool:
            ran = sum(pool.map(_run_one_in_pool, pending))
    return _summary(ran, agent_run_advance(run_id=run_id))


def _summary(ran: int, advanced: bool) -> str:
    return f"{ran} tool calls recorded; next turn {'submitted' if advanced else 'not yet'}"
