"""RQ entry points of the batches app: load by id, call a service. No rule lives here."""

from uuid import UUID

from batches.services import batch_cancel_jobs_run
from webhooks.services import webhook_attempt


def cancel_batch_jobs(batch_id: str) -> str:
    """The background cancel of a stopped batch's waiting jobs (default queue)."""
    return batch_cancel_jobs_run(batch_id=UUID(batch_id))


def deliver_callback(delivery_id: int, attempt: int = 1) -> str:
    """A batch callback's attempt queued before webhooks/ took the callbacks over: its row kept
    its id in ``WebhookDelivery`` (batches migration 0006). New ones are
    ``webhooks.tasks.deliver_webhook``."""
    return webhook_attempt(delivery_id=delivery_id, attempt=attempt)
