"""Every write on webhooks: a subject's subscription, an event's delivery, each attempt and its
retries, the sweep for deliveries Redis lost, and "deliver again".

    webhook_subscribe        a job's or an agent run's callback_url, at its submit
    webhook_record           an event: one WebhookDelivery, in the transaction that made it
    webhook_record_subscribed   the same, when the subject has a subscription
    webhook_attempt          one signed POST (alerts queue): delivered, retrying or failed
    webhooks_resume          pending deliveries whose RQ job was lost (the monitor, each pass)
    webhook_redeliver        a finished delivery made pending again (the admin's action)

At least once: the row is written with the event and is the truth; an RQ job only carries out
its next attempt. A worker killed during an attempt leaves the row pending and claimed, and the
sweep sends it again after ``LOST_DELIVERY_GRACE_SECONDS``: the receiver may then get the same
``LLM-Webhook-Id`` twice, never a delivery less.
"""

import logging
import random
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.delivery import DeliveryError, json_body
from alerts.dispatch import delivery_attempt_apply, delivery_claim, overdue_deliveries_resume
from alerts.targets import CALLBACK, redact_target, scrub
from llmops.queues import ALERTS_QUEUE, DELIVER_WEBHOOK_TASK
from runtime.redis_clients import queue as rq_queue
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.sending import post_callback
from webhooks.signing import (
    ATTEMPT_HEADER,
    EVENT_HEADER,
    ID_HEADER,
    SIGNATURE_HEADER,
    signature_header,
)
from webhooks.signing_secrets import signing_secrets_for

__all__ = [
    "LOST_DELIVERY_GRACE_SECONDS",
    "webhook_attempt",
    "webhook_record",
    "webhook_record_subscribed",
    "webhook_redeliver",
    "webhook_subscribe",
    "webhooks_resume",
]

logger = logging.getLogger(__name__)

LOST_DELIVERY_GRACE_SECONDS = 300.0
"""A pending delivery this far past its due time lost its RQ job: far longer than an attempt
may run (``_job_timeout``) plus the scheduler's poll, so a merely busy queue is rarely hit."""


def webhook_subscribe(
    *, subject_kind: str, subject_id: object, url: str, signer: str
) -> WebhookSubscription:
    """Keep a subject's callback URL: each final state it reaches is POSTed there."""
    return WebhookSubscription.objects.create(
        subject_kind=subject_kind, subject_id=str(subject_id), url=url, signer=signer
    )


def webhook_record(
    *,
    subject_kind: str,
    subject_id: object,
    event: str,
    url: str,
    signer: str,
    payload: dict[str, Any],
) -> WebhookDelivery:
    """Record one event's delivery and queue its first attempt after commit. Inside the
    transaction that made the event: recorded exactly when the event commits."""
    delivery = WebhookDelivery.objects.create(
        subject_kind=subject_kind,
        subject_id=str(subject_id),
        event=event,
        url=url,
        signer=signer,
        payload=payload,
        next_attempt_at=timezone.now(),
    )
    delivery_id = delivery.id
    # robust: a Redis error must not undo the event; the monitor's sweep enqueues it again.
    transaction.on_commit(lambda: _enqueue(delivery_id=delivery_id, attempt=1), robust=True)
    return delivery


def webhook_record_subscribed(
    *, subject_kind: str, subject_id: object, event: str, payload: Callable[[], dict[str, Any]]
) -> WebhookDelivery | None:
    """``webhook_record`` to the subject's subscription, if it has one (``payload`` is built
    only then). Returns the delivery, or None."""
    subscription = WebhookSubscription.objects.filter(
        subject_kind=subject_kind, subject_id=str(subject_id)
    ).first()
    if subscription is None:
        return None
    return webhook_record(
        subject_kind=subject_kind,
        subject_id=subject_id,
        event=event,
        url=subscription.url,
        signer=subscription.signer,
        payload=payload(),
    )


def _job_timeout() -> int:
    # httpx's timeout applies per phase (connect, write, read); leave room for all of them.
    return int(settings.WEBHOOK_TIMEOUT_SECONDS * 4) + 10


def _enqueue(*, delivery_id: int, attempt: int, delay: float | None = None) -> None:
    queue = rq_queue(ALERTS_QUEUE)
    if delay is None:
        queue.enqueue(DELIVER_WEBHOOK_TASK, delivery_id, attempt, job_timeout=_job_timeout())
    else:
        # Our own retries: the alerts worker's scheduler runs it when due.
        queue.enqueue_in(
            timedelta(seconds=delay),
            DELIVER_WEBHOOK_TASK,
            delivery_id,
            attempt,
            job_timeout=_job_timeout(),
        )


def retry_delay(*, attempt_in_round: int) -> float | None:
    """Seconds before the next attempt after failed attempt ``attempt_in_round`` (from 1) of a
    round, jitter included; None once ``WEBHOOK_RETRY_SCHEDULE`` is used up."""
    schedule = settings.WEBHOOK_RETRY_SCHEDULE
    if attempt_in_round > len(schedule):
        return None
    base = float(schedule[attempt_in_round - 1])
    return base * (1 + random.uniform(0, settings.WEBHOOK_RETRY_JITTER))


def _headers(delivery: WebhookDelivery, *, attempt: int, body: bytes) -> dict[str, str]:
    return {
        ID_HEADER: str(delivery.event_id),
        EVENT_HEADER: delivery.event,
        ATTEMPT_HEADER: str(attempt),
        SIGNATURE_HEADER: signature_header(secrets=signing_secrets_for(delivery.signer), body=body),
    }


def webhook_attempt(*, delivery_id: int, attempt: int) -> str:
    """Make attempt number ``attempt`` of one delivery. Returns the outcome, for the job log.

    The claim is an atomic conditional update on (state, attempts): a duplicate copy of the
    RQ job, or one that arrives after the delivery finished, sends nothing."""
    if not delivery_claim(WebhookDelivery, delivery_id=delivery_id, attempt=attempt):
        logger.info("webhook %s attempt %s: already done or taken", delivery_id, attempt)
        return "skipped"
    delivery = WebhookDelivery.objects.get(id=delivery_id)
    where = redact_target(kind=CALLBACK, target=delivery.url)
    started = time.monotonic()
    error: DeliveryError | None = None
    try:
        body = json_body(delivery.payload)
        headers = _headers(delivery, attempt=attempt, body=body)
        post_callback(url=delivery.url, body=body, headers=headers)
    except DeliveryError as exc:
        error = exc
    except Exception as exc:  # noqa: BLE001 - a sender bug must not lose the delivery record
        error = DeliveryError(scrub(f"{type(exc).__name__}: {exc}", target=delivery.url))
    elapsed_ms = int((time.monotonic() - started) * 1000)

    retry_in = None
    if error is not None and error.retryable:
        retry_in = retry_delay(attempt_in_round=attempt - delivery.round_start)
    outcome = _record_attempt(
        delivery_id=delivery_id,
        attempt=attempt,
        error=error,
        elapsed_ms=elapsed_ms,
        retry_in=retry_in,
    )
    what = f"webhook {delivery.id} ({delivery.event} of {delivery.subject_id})"
    if error is None:
        logger.info("%s delivered to %s (attempt %s)", what, where, attempt)
    elif retry_in is not None:
        logger.warning(
            "%s to %s failed (attempt %s: %s); retry in %.0fs",
            what,
            where,
            attempt,
            error,
            retry_in,
        )
    else:
        logger.error(
            "%s to %s failed for good after %s attempt(s): %s", what, where, attempt, error
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
    delivery = WebhookDelivery.objects.select_for_update().get(id=delivery_id)
    status_code = 200 if error is None else error.status_code
    delivery.last_status_code = status_code
    changed = delivery_attempt_apply(
        delivery,
        attempt=attempt,
        error=error,
        elapsed_ms=elapsed_ms,
        retry_in=retry_in,
        status=status_code,
    )
    delivery.save(update_fields=[*changed, "last_status_code"])
    if retry_in is not None:
        delay, next_attempt = retry_in, attempt + 1
        transaction.on_commit(
            lambda: _enqueue(delivery_id=delivery_id, attempt=next_attempt, delay=delay)
        )
        return "retrying"
    return "delivered" if error is None else "failed"


def webhooks_resume(*, grace_seconds: float = LOST_DELIVERY_GRACE_SECONDS) -> int:
    """Enqueue again the pending deliveries whose attempt is long overdue: Redis lost the RQ job
    (flush, failover), it was never pushed, or the worker died during the attempt. Returns how
    many were resumed."""
    return overdue_deliveries_resume(
        WebhookDelivery,
        grace_seconds=grace_seconds,
        enqueue=lambda delivery_id, attempt: _enqueue(delivery_id=delivery_id, attempt=attempt),
        what="webhook deliveries",
    )


@transaction.atomic
def webhook_redeliver(*, delivery_id: int) -> bool:
    """Make a delivered or failed delivery pending again and queue its next attempt after
    commit: a new round with the whole retry schedule, the same ``LLM-Webhook-Id``. False when
    it is still pending (its own attempts are under way)."""
    delivery = WebhookDelivery.objects.select_for_update().get(id=delivery_id)
    if delivery.state == WebhookDelivery.State.PENDING:
        return False
    delivery.state, delivery.round_start = WebhookDelivery.State.PENDING, delivery.attempts
    delivery.next_attempt_at = timezone.now()
    delivery.save(update_fields=["state", "round_start", "next_attempt_at"])
    next_attempt = delivery.attempts + 1
    transaction.on_commit(lambda: _enqueue(delivery_id=delivery_id, attempt=next_attempt))
    logger.info("webhook %s: delivered again on request", delivery_id)
    return True
