"""RQ entry points of the batches app: load by id, call a service. No rule lives here."""

from uuid import UUID

from batches.callbacks import callback_attempt
from batches.services import batch_cancel_jobs_run


def cancel_batch_jobs(batch_id: str) -> str:
    """The background cancel of a stopped batch's waiting jobs (default queue)."""
    return batch_cancel_jobs_run(batch_id=UUID(batch_id))


def deliver_callback(delivery_id: int, attempt: int = 1) -> str:
    """One attempt of a finished batch's callback (alerts queue)."""
    return callback_attempt(delivery_id=delivery_id, attempt=attempt)
