"""Putting a run's tool calls on the agents queue (one RQ job per turn's calls, its id kept on
the run), with a timeout that covers every pending call in turn. Services name the RQ job in
their own transaction and push it after their commit; the reconciler's sweep enqueues a task
that was lost (agents/sweep.py); the runner runs it."""

import logging
import uuid
from collections.abc import Iterable

from django.utils import timezone
from redis.exceptions import RedisError

from agents.models import AgentRun, AgentStep
from agents.tools import registered_tool
from llmops.queues import AGENT_TOOLS_TASK, AGENTS_QUEUE, agent_tools_job_id
from runtime.redis_clients import queue as rq_queue

__all__ = [
    "DEFAULT_TIMEOUT",
    "LEASE_MARGIN_SECONDS",
    "TASK_TIMEOUT_MARGIN",
    "agent_tools_enqueue",
    "agent_tools_job_new",
    "agent_tools_push",
]

logger = logging.getLogger(__name__)

LEASE_MARGIN_SECONDS = 10.0
"""Past its tool's timeout, a call's lease runs this much longer: the time to record it."""
DEFAULT_TIMEOUT = 60.0
TASK_TIMEOUT_MARGIN = 60
"""The RQ job's timeout: every pending call's timeout in turn, plus this."""


def agent_tools_job_new(run_id: uuid.UUID) -> str:
    """A new RQ job id for the run's tool task (the run keeps it: agents/sweep.py)."""
    return agent_tools_job_id(run_id, uuid.uuid4().hex[:12])


def agent_tools_push(*, run_id: uuid.UUID, rq_job_id: str, tool_names: Iterable[str]) -> bool:
    """Put the run's tool task on the agents queue under ``rq_job_id`` (the one the run keeps),
    with a timeout that covers its pending calls (``tool_names``) in turn. Redis being down is
    logged, never raised: the sweep enqueues it again."""
    timeouts = [
        (tool.timeout if (tool := registered_tool(name)) else DEFAULT_TIMEOUT)
        for name in tool_names
    ]
    try:
        # The process's one client and queue (runtime/redis_clients.py): django-rq's
        # get_queue() opened a new connection, and its handshake, for every task.
        rq_queue(AGENTS_QUEUE).enqueue(
            AGENT_TOOLS_TASK,
            str(run_id),
            job_id=rq_job_id,
            job_timeout=int(sum(timeouts) + LEASE_MARGIN_SECONDS * len(timeouts))
            + TASK_TIMEOUT_MARGIN,
            description=f"tool calls of agent run {run_id}",
        )
    except RedisError:
        logger.exception("agent run %s: its tool task could not be enqueued", run_id)
        return False
    return True


def agent_tools_enqueue(*, run_id: uuid.UUID) -> str | None:
    """Put the run's tool task on the agents queue under a new RQ job id, which the run
    keeps (the sweep's path, outside any service's transaction)."""
    rq_job_id = agent_tools_job_new(run_id)
    names = list(
        AgentStep.objects.filter(
            run_id=run_id, kind=AgentStep.Kind.TOOL, status=AgentStep.Status.PENDING
        ).values_list("name", flat=True)
    )
    AgentRun.objects.filter(id=run_id).update(
        tools_rq_job_id=rq_job_id, tools_enqueued_at=timezone.now()
    )
    if not agent_tools_push(run_id=run_id, rq_job_id=rq_job_id, tool_names=names):
        return None
    return rq_job_id
