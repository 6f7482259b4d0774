"""A finished batch's callback: one POST to its ``callback_url``, delivered and retried on its own.

The callback is recorded as a ``BatchCallbackDelivery`` in the transaction that finishes the
batch, so it is recorded exactly once and never for a rolled-back finish. After commit one
``batches.tasks.deliver_callback`` RQ job goes on the ``alerts`` queue; a failure is retried on
``ALERT_RETRY_SCHEDULE`` (a 4xx other than 408/409/425/429 is not), every attempt is kept on the
row, and the monitor puts back a delivery whose RQ job Redis lost. The body is
``{"type": "batch.finished", "batch": <the batch as the API shows it>}``; the sending itself (the
address check, the POST, the error classes) is ``alerts.delivery.post_callback``.

The URL is a secret (a token may sit in its path or query): it stays on the batch's row only,
and logs and stored errors show only its host (``alerts.targets.redact_target``/``scrub``).
"""

import logging
import time
from datetime import timedelta
from typing import Any

import django_rq
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.delivery import DeliveryError, post_callback
from alerts.dispatch import delivery_claim, overdue_deliveries_resume
from alerts.targets import WEBHOOK, redact_target, scrub
from batches.models import Batch, BatchCallbackDelivery
from llmops.queues import ALERTS_QUEUE, DELIVER_CALLBACK_TASK

__all__ = [
    "LOST_CALLBACK_GRACE_SECONDS",
    "callback_attempt",
    "callback_record",
    "callbacks_resume",
]

logger = logging.getLogger(__name__)

LOST_CALLBACK_GRACE_SECONDS = 300.0
"""A pending callback this far past its due time lost its RQ job (as for alert deliveries)."""


def callback_record(*, batch: Batch, representation: dict[str, Any]) -> BatchCallbackDelivery:
    """Record the batch's callback and queue its delivery after commit. Inside the transaction
    that finished the batch."""
    delivery = BatchCallbackDelivery.objects.create(
        batch=batch,
        payload={"type": "batch.finished", "batch": representation},
        next_attempt_at=timezone.now(),
    )
    delivery_id = delivery.id
    # robust: a Redis error must not undo the finish; the monitor's sweep enqueues it again.
    transaction.on_commit(lambda: _enqueue(delivery_id=delivery_id, attempt=1), robust=True)
    return delivery


def _job_timeout() -> int:
    # httpx's timeout applies per phase (connect, write, read); leave room for all of them.
    return int(settings.ALERT_DELIVERY_TIMEOUT * 4) + 10


def _enqueue(*, delivery_id: int, attempt: int, delay: float | None = None) -> None:
    queue = django_rq.get_queue(ALERTS_QUEUE)
    if delay is None:
        queue.enqueue(DELIVER_CALLBACK_TASK, delivery_id, attempt, job_timeout=_job_timeout())
    else:
        # Our own retries: the alerts worker's scheduler runs it when due.
        queue.enqueue_in(
            timedelta(seconds=delay),
            DELIVER_CALLBACK_TASK,
            delivery_id,
            attempt,
            job_timeout=_job_timeout(),
        )


def callback_attempt(*, delivery_id: int, attempt: int) -> str:
    """Make attempt number ``attempt`` of one callback. Returns the outcome, for the job log.

    The claim is an atomic conditional update on (state, attempts): a duplicate copy of the
    RQ job, or one that arrives after the delivery finished, sends nothing.
    """
    if not delivery_claim(BatchCallbackDelivery, delivery_id=delivery_id, attempt=attempt):
        logger.info("batch callback %s attempt %s: already done or taken", delivery_id, attempt)
        return "skipped"
    delivery = BatchCallbackDelivery.objects.select_related("batch").get(id=delivery_id)
    url = delivery.batch.callback_url
    where = redact_target(kind=WEBHOOK, target=url)
    started = time.monotonic()
    error: DeliveryError | None = None
    try:
        post_callback(url=url, payload=delivery.payload)
    except DeliveryError as exc:
        error = exc
    except Exception as exc:  # noqa: BLE001 - a sender bug must not lose the delivery record
        error = DeliveryError(scrub(f"{type(exc).__name__}: {exc}", target=url))
    elapsed_ms = int((time.monotonic() - started) * 1000)

    schedule = settings.ALERT_RETRY_SCHEDULE
    retry_in = None
    if error is not None and error.retryable and attempt <= len(schedule):
        retry_in = float(schedule[attempt - 1])
    outcome = _record_attempt(
        delivery_id=delivery_id,
        attempt=attempt,
        error=error,
        elapsed_ms=elapsed_ms,
        retry_in=retry_in,
    )
    batch_id = delivery.batch_id
    if error is None:
        logger.info("batch %s callback delivered to %s", batch_id, where)
    elif retry_in is not None:
        logger.warning(
            "batch %s callback to %s failed (attempt %s: %s); retry in %ss",
            batch_id,
            where,
            attempt,
            error,
            retry_in,
        )
    else:
        logger.error(
            "batch %s callback to %s failed for good after %s attempt(s): %s",
            batch_id,
            where,
            attempt,
            error,
        )
    return outcome


@transaction.atomic
def _record_attempt(
    *,
    delivery_id: int,
    attempt: int,
    error: DeliveryError | None,
    elapsed_ms: int,
    retry_in: float | None,
) -> str:
    now = timezone.now()
    delivery = BatchCallbackDelivery.objects.select_for_update().get(id=delivery_id)
    entry: dict[str, Any] = {"attempt": attempt, "at": now.isoformat(), "ok": error is None}
    entry["ms"] = elapsed_ms
    if error is not None:
        entry["error"] = str(error)[:500]
        delivery.last_error = str(error)[:2000]
    delivery.history = [*delivery.history, entry]
    if error is None:
        delivery.state, delivery.delivered_at = BatchCallbackDelivery.State.DELIVERED, now
        delivery.next_attempt_at = None
    elif retry_in is None:
        delivery.state, delivery.next_attempt_at = BatchCallbackDelivery.State.FAILED, None
    else:
        delivery.next_attempt_at = now + timedelta(seconds=retry_in)
    delivery.save(
        update_fields=["state", "delivered_at", "last_error", "history", "next_attempt_at"]
    )
    if retry_in is not None:
        delay, next_attempt = retry_in, attempt + 1
        transaction.on_commit(
            lambda: _enqueue(delivery_id=delivery_id, attempt=next_attempt, delay=delay)
        )
        return "retrying"
    return "delivered" if error is None else "failed"


def callbacks_resume(*, grace_seconds: float = LOST_CALLBACK_GRACE_SECONDS) -> int:
    """Enqueue again the pending callbacks whose attempt is long overdue: Redis lost the RQ job
    (flush, failover) or it was never pushed. Returns how many were resumed."""
    return overdue_deliveries_resume(
        BatchCallbackDelivery,
        grace_seconds=grace_seconds,
        enqueue=lambda delivery_id, attempt: _enqueue(delivery_id=delivery_id, attempt=attempt),
        what="batch callbacks",
    )
