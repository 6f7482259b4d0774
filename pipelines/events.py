"""Live pipeline events on the owner's WebSocket ``/ws/jobs/`` (jobs/consumers.py), beside the
job events of its steps:

    {"type": "pipeline.step_completed",
     "pipeline": {"id", "status": "running", "step_count", "step": {"index", "job_id"}}}
    {"type": "pipeline.finished", "pipeline": {"id", "status", "step_count", "finished_at"}}

``pipeline.finished`` goes out whenever a pipeline stops: ``completed``, ``cancelled``, or
``failed`` (which a requeue of its failed step's job may resume). Published after the commit of
the transition that caused them, through the same sender and timeout as job events
(jobs/events.py): best effort, never failing or holding a job.
"""

import logging
from typing import Any

from django.db import transaction

from jobs.events import publish_event
from jobs.models import LlmJob
from llmops.queues import job_events_group
from pipelines.models import Pipeline

__all__ = ["publish_finished_on_commit", "publish_step_completed_on_commit"]

logger = logging.getLogger("pipelines.events")

STEP_COMPLETED = "pipeline.step_completed"
FINISHED = "pipeline.finished"


def _on_commit(user_id: int, pipeline_id: Any, message: dict[str, Any]) -> None:
    def publish() -> None:
        try:
            publish_event([job_events_group(user_id)], message, about=f"pipeline {pipeline_id}")
        except Exception:
            logger.exception("pipeline %s %s event failed", pipeline_id, message["type"])

    transaction.on_commit(publish)


def publish_step_completed_on_commit(pipeline: Pipeline, *, index: int, job: LlmJob) -> None:
    message = {
        "type": STEP_COMPLETED,
        "pipeline": {
            "id": str(pipeline.id),
            "status": pipeline.status,
            "step_count": pipeline.step_count,
            "step": {"index": index, "job_id": str(job.id)},
        },
    }
    _on_commit(pipeline.user_id, pipeline.id, message)


def publish_finished_on_commit(pipeline: Pipeline) -> None:
    finished_at = pipeline.finished_at
    message = {
        "type": FINISHED,
        "pipeline": {
            "id": str(pipeline.id),
            "status": pipeline.status,
            "step_count": pipeline.step_count,
            "finished_at": finished_at.isoformat().replace("+00:00", "Z") if finished_at else None,
        },
    }
    _on_commit(pipeline.user_id, pipeline.id, message)
