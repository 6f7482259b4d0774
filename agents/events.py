"""Live agent run events on ``/ws/jobs/`` (jobs/consumers.py), to the run's owner and to
``?all=1`` staff, beside the job events (and ``job.delta`` text) of its turns:

    {"type": "agent.step", "run": {"id", "status"}, "step": {"index", "kind", "status", "job",
     "name", "call_id", "is_error", "started_at", "finished_at"}}
    {"type": "agent.updated", "run": {"id", "status", "turns", "cost_usd", "error",
     }}

``agent.step`` goes out when a step starts or finishes, ``agent.updated`` when the run's status
or cost changes. Published after the commit of the change, through the same sender as job events
(jobs/events.py), in line with them and in order: best effort, never failing or holding a run.
Each is queued without waiting for its hand-off (a turn's commit queued four or five, each
waited for in turn); a run's tool task is pushed once they are out (``events_sent``), so that
its calls' ``running`` never overtakes their ``pending``. One that fails is logged.
"""

import logging
import threading
from concurrent.futures import Future
from typing import Any

from django.conf import settings
from django.db import transaction

from agents.models import AgentRun, AgentStep
from jobs.events import event_published, publish_event_nowait
from llmops.queues import all_jobs_group, job_events_group

__all__ = ["STEP", "UPDATED", "events_sent", "publish_run_on_commit", "publish_step_on_commit"]

logger = logging.getLogger("agents.events")

STEP = "agent.step"
UPDATED = "agent.updated"


def _time(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def _on_commit(user_id: int, run_id: Any, message: dict[str, Any]) -> None:
    def publish() -> None:
        try:
            future = publish_event_nowait(
                [job_events_group(user_id), all_jobs_group()],
                message,
                subject=f"agent run {run_id}",
                urgent=True,
            )
        except Exception:
            logger.exception("agent run %s %s event failed", run_id, message["type"])
            return
        future.add_done_callback(lambda done: _log_failure(done, run_id, message["type"]))
        _queued.last = future

    transaction.on_commit(publish)


_queued = threading.local()
"""The last event this thread queued (``last``): a subject's events go out in order."""


def events_sent() -> None:
    """Wait until the events this thread queued are handed off, at most
    ``JOB_EVENTS_PUBLISH_TIMEOUT`` (one that is not is abandoned and logged, never sent late)."""
    future = getattr(_queued, "last", None)
    _queued.last = None
    if future is not None:
        event_published(future, about="agent run", timeout=settings.JOB_EVENTS_PUBLISH_TIMEOUT)


def _log_failure(future: "Future[None]", run_id: Any, kind: str) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.warning("agent run %s %s event not published: %r", run_id, kind, future.exception())


def step_payload(step: AgentStep) -> dict[str, Any]:
    return {
        "index": step.index,
        "kind": step.kind,
        "status": step.status,
        "job": str(step.job_id) if step.job_id else None,
        "name": step.name,
        "call_id": step.call_id,
        "is_error": step.is_error,
        "started_at": _time(step.started_at),
        "finished_at": _time(step.finished_at),
    }


def publish_step_on_commit(run: AgentRun, step: AgentStep) -> None:
    message = {
        "type": STEP,
        "run": {"id": str(run.id), "status": run.status},
        "step": step_payload(step),
    }
    _on_commit(run.user_id, run.id, message)


def publish_run_on_commit(run: AgentRun) -> None:
    error = {"code": run.error_code, "message": run.error_message} if run.error_code else None
    message = {
        "type": UPDATED,
        "run": {
            "id": str(run.id),
            "status": run.status,
            "turns": run.turns,
            "cost_usd": f"{run.cost_usd:.6f}",
            "error": error,
        },
    }
    _on_commit(run.user_id, run.id, message)
