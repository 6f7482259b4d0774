"""How a webhook is signed, and how a receiver checks it. Pure: no Django model, no settings.

Each POST carries ``LLM-Signature: t=<unix seconds>,v1=<hex>``: HMAC-SHA256 under the signing
secret of ``<t>.<body>``, the body byte for byte as sent (Stripe's scheme, so receivers can
reuse what they know). While a rolled secret's grace runs, a second ``v1=`` carries the old
secret's signature. ``LLM-Webhook-Id`` is the same for every attempt of one delivery: the
receiver's key for dropping a duplicate (delivery is at least once).

Signing secrets are never stored: ``secret_for`` derives one from the server's signing key, the
owner (an API key or a feature) and the owner's generation (bumped by a roll), so a copy of the
database holds nothing that signs.
"""

import base64
import hashlib
import hmac
import time

__all__ = [
    "ATTEMPT_HEADER",
    "EVENT_HEADER",
    "ID_HEADER",
    "SECRET_PREFIX",
    "SIGNATURE_HEADER",
    "TOLERANCE_SECONDS",
    "feature_owner",
    "key_owner",
    "secret_for",
    "signature_header",
    "signing_key",
    "verify",
]

SIGNATURE_HEADER = "LLM-Signature"
ID_HEADER = "LLM-Webhook-Id"
"""The delivery's id (a UUID), the same on every attempt: a receiver drops one it has seen."""
EVENT_HEADER = "LLM-Webhook-Event"
"""The body's ``type``: ``job.completed``, ``agent_run.failed``, ``batch.finished``..."""
ATTEMPT_HEADER = "LLM-Webhook-Attempt"
SECRET_PREFIX = "whsec_"
TOLERANCE_SECONDS = 300
"""How old a signature a receiver should accept: a replayed request older than this is refused
(our retries sign again at each attempt, so a live one is never that old)."""


def key_owner(api_key_id: int) -> str:
    """The owner of an API key's signing secret: what submitted with the key is signed with it."""
    return f"key:{api_key_id}"


def feature_owner(feature: str) -> str:
    """The owner of a feature's signing secret: what was submitted without an API key."""
    return f"feature:{feature}"


def signing_key(*, configured: str, secret_key: str) -> str:
    """``WEBHOOK_SIGNING_KEY``, or one derived from ``DJANGO_SECRET_KEY`` when it is empty."""
    return configured or f"webhooks:{secret_key}"


def secret_for(*, key: str, owner: str, generation: int) -> str:
    """The signing secret of ``owner`` at ``generation``: ``whsec_`` and 256 bits."""
    message = f"llmops webhook secret\x00{owner}\x00{generation}".encode()
    digest = hmac.new(key.encode(), message, hashlib.sha256).digest()
    return SECRET_PREFIX + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _sign(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(*, secrets: list[str], body: bytes, timestamp: int | None = None) -> str:
    """The ``LLM-Signature`` value: ``t=`` and one ``v1=`` per secret, current first."""
    when = int(time.time()) if timestamp is None else timestamp
    return ",".join([f"t={when}", *(f"v1={_sign(s, when, body)}" for s in secrets)])


def verify(
    *,
    secret: str,
    header: str,
    body: bytes,
    tolerance: float = TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """What a receiver does (docs/api.md#webhooks has the same in a few lines): True when one
    ``v1`` of ``header`` is the signature of ``body`` under ``secret`` and ``t`` is recent."""
    timestamp, signatures = None, []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1":
            signatures.append(value)
    if timestamp is None or not signatures:
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = _sign(secret, timestamp, body)
    return any(hmac.compare_digest(expected, signature) for signature in signatures)
