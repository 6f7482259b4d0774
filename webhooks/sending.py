"""The POST of one webhook to a caller's URL. Knows nothing about the database or retries
(webhooks/services.py owns both); raises ``alerts.delivery.DeliveryError``, its message never
holding the URL."""

from django.conf import settings

from alerts import targets
from alerts.delivery import DeliveryError, post
from alerts.targets import scrub

__all__ = ["USER_AGENT", "post_callback"]

USER_AGENT = "llmops-callbacks"


def post_callback(*, url: str, body: bytes, headers: dict[str, str] | None = None) -> None:
    """POST ``body`` (JSON) to a caller's URL. Its host is looked up once, now, so a name that
    moved onto a private network is refused too; the request then connects to the addresses
    that were checked, never to a second answer of the name (DNS rebinding), with the name's
    ``Host`` header and TLS server name."""
    try:
        problem, addresses = targets.callback_addresses(url)
    except OSError as exc:
        # Retried as any connection error: a name may resolve again.
        raise DeliveryError(f"ConnectError: {scrub(str(exc), target=url)}") from None
    if problem and not settings.CALLBACK_ALLOW_PRIVATE_HOSTS:
        raise DeliveryError(problem, retryable=False)
    post(
        url=url,
        content=body,
        headers={"User-Agent": USER_AGENT, **(headers or {})},
        timeout=settings.WEBHOOK_TIMEOUT_SECONDS,
        connect_to=addresses,
    )
