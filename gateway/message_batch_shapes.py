"""The Message Batches API's shapes at the Anthropic door (docs/front-doors.md#message-batches):
a batch's id, the ``message_batch`` object and one line of its results, from a batch of
batches/ and its jobs. Pure: no database, no network."""

import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from batches.models import Batch
from gateway.anthropic_shapes import error_body, message_of
from gateway.errors import GatewayError, from_job
from jobs.models import LlmJob

__all__ = [
    "BATCH_ID_PREFIX",
    "EXPIRED_REASON",
    "batch_id_of",
    "batch_object",
    "batch_uuid",
    "deleted_object",
    "processing_status",
    "result_line",
]

BATCH_ID_PREFIX = "msgbatch_"
"""The API's ids look like ``msgbatch_...``: here the prefix and the batch's UUID in hex."""
EXPIRED_REASON = "deadline_exceeded"
"""A request whose job did not start before the batch's deadline (its ``expires_at``) ended
``expired``, as a request the API did not reach in 24 hours does."""


def batch_id_of(batch: Batch) -> str:
    return f"{BATCH_ID_PREFIX}{batch.id.hex}"


def batch_uuid(batch_id: str) -> UUID | None:
    """The batch's UUID of an id this door gave out; None for anything else."""
    if not batch_id.startswith(BATCH_ID_PREFIX):
        return None
    try:
        return UUID(hex=batch_id[len(BATCH_ID_PREFIX) :])
    except ValueError:
        return None


def _time(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def processing_status(batch: Batch) -> str:
    """``ended`` once every request ended; ``canceling`` between a cancel and then."""
    if batch.finished_at is not None:
        return "ended"
    return "canceling" if batch.cancel_requested_at is not None else "in_progress"


def batch_object(
    batch: Batch, *, counts: dict[str, int], results_url: str | None
) -> dict[str, Any]:
    """The API's ``message_batch``. ``expires_at`` is the batch's deadline (24 hours after its
    creation unless ``LLM-Deadline-Seconds`` said otherwise); ``results_url`` only once ended."""
    ended = batch.finished_at is not None
    return {
        "id": batch_id_of(batch),
        "type": "message_batch",
        "processing_status": processing_status(batch),
        "request_counts": counts,
        "created_at": _time(batch.created_at),
        "ended_at": _time(batch.finished_at),
        "expires_at": _time(batch.deadline or batch.created_at),
        "cancel_initiated_at": _time(batch.cancel_requested_at),
        "archived_at": None,
        "results_url": results_url if ended else None,
    }


def deleted_object(batch_id: str) -> dict[str, Any]:
    return {"id": batch_id, "type": "message_batch_deleted"}


def _result(job: LlmJob) -> dict[str, Any]:
    if job.status == LlmJob.Status.COMPLETED:
        return {"type": "succeeded", "message": message_of(job)}
    if job.status == LlmJob.Status.CANCELLED:
        return {"type": "canceled"}
    if job.status == LlmJob.Status.FAILED:
        if job.error_code == EXPIRED_REASON:
            return {"type": "expired"}
        return {"type": "errored", "error": error_body(from_job(job))}
    # Requeued from the DLQ after its batch ended: its answer is for the job API to give.
    error = GatewayError(
        500, f"Job {job.id} is {job.status} again (requeued after its batch ended)."
    )
    return {"type": "errored", "error": error_body(error)}


def result_line(custom_id: str, job: LlmJob) -> bytes:
    """One line of the results' JSONL: the request's ``custom_id`` and how its job ended."""
    line = {"custom_id": custom_id, "result": _result(job)}
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"
