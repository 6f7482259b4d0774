"""A finished batch's callback: one POST to its ``callback_url``, on the delivery path of alerts.

The callback is recorded as an ``Alert`` (source ``batch``) with one ``AlertDelivery`` of kind
``callback``, in the transaction that finishes the batch, so it is recorded exactly once and
never for a rolled-back finish. From there alerts/dispatch.py owns it as any alert: the delivery
runs on the ``alerts`` queue after commit, failures are retried on ``ALERT_RETRY_SCHEDULE``
(4xx other than 408/409/425/429 are not), every attempt is kept on the delivery row, the monitor
puts back a delivery whose RQ job Redis lost, and staff see it under Alerts with its target
redacted. The body is ``{"type": "batch.finished", "batch": <the batch as the API shows it>}``.

The URL is a secret (a token may sit in its path or query): logs and stored errors show only its
host (``alerts.targets.redact_target``/``scrub``).
"""

from typing import Any

from alerts.destinations import Destination
from alerts.models import Alert, Severity
from alerts.notifications import alert_create
from alerts.targets import CALLBACK
from batches.models import Batch

__all__ = ["CALLBACK_SOURCE", "callback_record"]

CALLBACK_SOURCE = "batch"
"""``Alert.source`` of a batch callback: the Alerts admin filters on it."""


def callback_record(*, batch: Batch, representation: dict[str, Any]) -> Alert:
    """Record the batch's callback and queue its delivery after commit. Inside the transaction
    that finished the batch."""
    return alert_create(
        fingerprint=f"batch-callback:{batch.id}",
        # Not an incident: the lowest severity, and never routed (its only destination is the
        # callback itself).
        severity=Severity.WARNING,
        action=Alert.Action.TRIGGER,
        source=CALLBACK_SOURCE,
        title=f"batch {batch.name or batch.id} finished: {batch.status}",
        body=(
            f"{batch.completed} completed, {batch.failed} failed, {batch.cancelled} cancelled "
            f"of {batch.total} items"
        ),
        details={"type": "batch.finished", "batch": representation},
        destinations=[Destination(kind=CALLBACK, target=batch.callback_url)],
    )
