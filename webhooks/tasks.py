"""RQ entry points of the webhooks app: load by id, call a service. No rule lives here."""

from webhooks.services import webhook_attempt

__all__ = ["deliver_webhook"]


def deliver_webhook(delivery_id: int, attempt: int = 1) -> str:
    """One attempt of a webhook delivery (alerts queue)."""
    return webhook_attempt(delivery_id=delivery_id, attempt=attempt)
