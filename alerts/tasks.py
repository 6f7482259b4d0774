"""RQ entry points of the alerts app: load by id, call a service. No rule lives here.

All run on the ``alerts`` queue.
"""

import logging

from alerts.dispatch import alert_delivery_attempt
from alerts.notifications import alert_raise_for_failure, alert_resolve_failure_if_handled
from dlq.models import FailureRecord

logger = logging.getLogger(__name__)


def alert_for_failure(failure_id: int) -> str:
    failure = FailureRecord.objects.filter(id=failure_id).first()
    if failure is None:
        logger.warning("failure %s is gone; no alert", failure_id)
        return "missing"
    alert = alert_raise_for_failure(failure=failure)
    return f"alert {alert.id}" if alert else "not sent (folded, already alerted or handled)"


def failure_fingerprint_check(fingerprint: str) -> str:
    alert = alert_resolve_failure_if_handled(fingerprint=fingerprint)
    return f"resolve {alert.id}" if alert else "no resolve"


def deliver_alert(delivery_id: int, attempt: int = 1) -> str:
    return alert_delivery_attempt(delivery_id=delivery_id, attempt=attempt)
