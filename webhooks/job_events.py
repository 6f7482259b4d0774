"""A job's webhooks: its final states POSTed to its ``callback_url`` (registered in apps.py with
``on_transition(..., in_transaction=True)``).

A job submitted with a callback URL has a ``WebhookSubscription`` and the metadata marker
``MARKER_KEY``; every final transition of such a job records one delivery, in the transition's
transaction, whose body is the job as the job API shows it: ``{"type": "job.<status>", "job":
{...}}``. A requeued job that ends again is POSTed again. Every other job passes without a query.
"""

import logging
from typing import Any

from jobs.models import LlmJob
from jobs.representation import JobOutputSerializer
from jobs.transitions import Transition
from webhooks.models import JOB_MARKER_KEY, Subject
from webhooks.services import webhook_record_subscribed

__all__ = ["job_webhook_transition"]

logger = logging.getLogger(__name__)

_FINAL = frozenset(
    {
        Transition.COMPLETED,
        Transition.DEAD_LETTERED,
        Transition.RECOVERED,
        Transition.CANCELLED,
    }
)


def _may_have_callback(job: LlmJob) -> bool:
    if "metadata" not in job.__dict__:
        # Left unread by the caller: reading it would cost a query anyway.
        return True
    metadata = job.metadata
    return isinstance(metadata, dict) and JOB_MARKER_KEY in metadata


def job_webhook_transition(job: LlmJob, transition: Transition) -> None:
    """Record the job's webhook when it reached a final state; inside the transition."""
    if transition not in _FINAL or job.status not in LlmJob.FINAL_STATUSES:
        return
    if not _may_have_callback(job):
        return

    def payload() -> dict[str, Any]:
        # Read again in the transition's transaction: the instance may hold F() expressions.
        fresh = LlmJob.objects.select_related("provider_batch").get(id=job.id)
        try:
            shown = dict(JobOutputSerializer(fresh).data)
        except Exception:
            # A representation bug must not undo the job's final state: the receiver still
            # learns of it, and polls the job.
            logger.exception("job %s: its webhook body falls back to id and status", job.id)
            shown = {"id": str(fresh.id), "status": fresh.status}
        return {"type": f"job.{fresh.status}", "job": shown}

    webhook_record_subscribed(
        subject_kind=Subject.JOB, subject_id=job.id, event=f"job.{job.status}", payload=payload
    )
