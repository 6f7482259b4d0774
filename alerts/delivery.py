"""One sender per destination kind. A sender sends one message or raises DeliveryError.

Senders know nothing about the database or about retries (alerts/dispatch.py owns both).
Their errors never contain the target: it is a secret. (The settings keep the ``httpx`` logger
at WARNING for the same reason: its INFO lines carry the request URL.)
"""

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from django.conf import settings
from django.core.mail import get_connection, send_mail

from alerts import targets
from alerts.pinned_http import pinned_client
from alerts.targets import scrub
from llmops.queues import KEY_PREFIX

__all__ = ["SENDERS", "AlertMessage", "DeliveryError", "json_body", "post", "send"]

# A 4xx other than these means the request or the destination is wrong (revoked Slack hook,
# bad routing key): sending the same thing again cannot succeed.
_RETRYABLE_4XX = {408, 409, 425, 429}

_SLACK_EMOJI = {"WARNING": ":warning:", "ERROR": ":red_circle:", "CRITICAL": ":rotating_light:"}


@dataclass(frozen=True)
class AlertMessage:
    """What to say, independent of where it goes."""

    alert_id: int
    fingerprint: str
    severity: str
    action: str
    """trigger or resolve"""
    title: str
    body: str
    source: str
    created_at: datetime
    details: dict[str, Any] = field(default_factory=dict)
    folded_count: int = 0
    folded_since: datetime | None = None

    @property
    def dedup_key(self) -> str:
        # One PagerDuty incident per fingerprint: a follow-up after the dedup window updates the
        # open incident, and a resolve closes the incident its trigger opened.
        return f"{KEY_PREFIX}{self.fingerprint}"[:255]

    @property
    def is_resolve(self) -> bool:
        return self.action == "resolve"


class DeliveryError(Exception):
    """A failed send; ``retryable`` is False when sending the same again cannot help;
    ``status_code``: the destination's HTTP status, when it answered."""

    def __init__(
        self, message: str, *, retryable: bool = True, status_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code


def json_body(payload: Any) -> bytes:
    """A JSON body as httpx's ``json=`` writes one (compact, UTF-8)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8")


def _post_json(*, url: str, payload: dict[str, Any]) -> None:
    post(url=url, content=json_body(payload), headers={"User-Agent": "llmops-alerts"})


def post(
    *,
    url: str,
    content: bytes,
    headers: dict[str, str],
    timeout: float | None = None,
    connect_to: Sequence[targets.IPAddress] | None = None,
) -> None:
    """POST ``content`` as JSON; with ``connect_to``, to those addresses only
    (alerts/pinned_http.py). Raises DeliveryError, its message scrubbed of the URL."""
    headers = {"Content-Type": "application/json", **headers}
    if timeout is None:
        timeout = settings.ALERT_DELIVERY_TIMEOUT
    try:
        if connect_to is not None:
            with pinned_client(addresses=connect_to, timeout=timeout) as client:
                response = client.post(url, content=content, headers=headers)
        else:
            response = httpx.post(url, content=content, timeout=timeout, headers=headers)
    except httpx.HTTPError as exc:
        # httpx messages may quote the URL; keep the class and a scrubbed message.
        raise DeliveryError(f"{type(exc).__name__}: {scrub(str(exc), target=url)}") from None
    if response.is_success:
        return
    status = response.status_code
    # Scrubbed before it is cut: a cut through a secret would leave its first half unscrubbed.
    snippet = scrub(response.text[:10_000], target=url)[:200].strip()
    retryable = status >= 500 or status in _RETRYABLE_4XX
    raise DeliveryError(
        f"HTTP {status}: {snippet}".rstrip(": "), retryable=retryable, status_code=status
    )


def _webhook_payload(message: AlertMessage) -> dict[str, Any]:
    return {
        "id": message.alert_id,
        "fingerprint": message.fingerprint,
        "dedup_key": message.dedup_key,
        "severity": message.severity,
        "action": message.action,
        "status": "resolved" if message.is_resolve else "firing",
        "title": message.title,
        "body": message.body,
        "source": message.source,
        "details": message.details,
        "folded_count": message.folded_count,
        "folded_since": message.folded_since.isoformat() if message.folded_since else None,
        "created_at": message.created_at.isoformat(),
    }


def send_webhook(*, target: str, message: AlertMessage) -> None:
    _post_json(url=target, payload=_webhook_payload(message))


def send_slack(*, target: str, message: AlertMessage) -> None:
    emoji = ":white_check_mark:" if message.is_resolve else _SLACK_EMOJI[message.severity]
    headline = f"{emoji} *[{message.severity}] {message.title}*"
    context = f"`{message.fingerprint}` · {settings.ALERT_SOURCE} · alert #{message.alert_id}"
    blocks: list[dict[str, Any]] = [
        # Slack caps a section's text at 3000 characters.
        {"type": "section", "text": {"type": "mrkdwn", "text": headline[:3000]}},
    ]
    if message.body:
        body = f"```{message.body[:2900]}```"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": body}})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]})
    # `text` is the notification and fallback line; `blocks` is what the channel shows.
    payload = {"text": f"[{message.severity}] {message.title}", "blocks": blocks}
    _post_json(url=target, payload=payload)


def send_pagerduty(*, target: str, message: AlertMessage) -> None:
    payload = {
        "routing_key": target,
        "event_action": "resolve" if message.is_resolve else "trigger",
        "dedup_key": message.dedup_key,
        "payload": {
            # PagerDuty truncates summaries at 1024 characters.
            "summary": f"[{message.severity}] {message.title}"[:1024],
            "severity": message.severity.lower(),
            "source": settings.ALERT_SOURCE,
            "component": str(message.details.get("feature") or message.details.get("queue", "")),
            "group": str(message.details.get("model", "")),
            "class": str(message.details.get("reason_code") or message.source),
            "timestamp": message.created_at.isoformat(),
            "custom_details": {
                "body": message.body,
                "folded_count": message.folded_count,
                **message.details,
            },
        },
        "client": "llmops",
    }
    try:
        _post_json(url=settings.ALERT_PAGERDUTY_EVENTS_URL, payload=payload)
    except DeliveryError as exc:
        # The routing key is in the request body, not the URL; PagerDuty may echo it in errors.
        raise DeliveryError(
            scrub(str(exc), target=target), retryable=exc.retryable, status_code=exc.status_code
        ) from None


def send_email(*, target: str, message: AlertMessage) -> None:
    recipients = [a.strip() for a in target.split(",") if a.strip()]
    prefix = "RESOLVED" if message.is_resolve else message.severity
    try:
        send_mail(
            subject=f"[{prefix}] {message.title}"[:250],
            message=f"{message.body}\n\nfingerprint: {message.fingerprint}\n",
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=recipients,
            connection=get_connection(timeout=settings.ALERT_DELIVERY_TIMEOUT),
        )
    except (OSError, ValueError) as exc:
        # smtplib's errors are OSError subclasses; they name the server, not a secret.
        raise DeliveryError(f"{type(exc).__name__}: {exc}") from None


SENDERS: dict[str, Callable[..., None]] = {
    targets.SLACK: send_slack,
    targets.PAGERDUTY: send_pagerduty,
    targets.WEBHOOK: send_webhook,
    targets.EMAIL: send_email,
}


def send(*, kind: str, target: str, message: AlertMessage) -> None:
    sender = SENDERS.get(kind)
    if sender is None:
        raise DeliveryError(f"unknown destination kind {kind!r}", retryable=False)
    sender(target=target, message=message)
