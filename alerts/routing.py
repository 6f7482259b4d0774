"""Where the alerts of a severity go, and how a destination is shown without leaking it.

Targets are secrets (a Slack webhook URL posts to a channel, a PagerDuty routing key pages
people): everything that logs, prints or stores an error uses ``redact_target``.
"""

from dataclasses import dataclass
from urllib.parse import urlparse

from django.conf import settings

from alerts.models import AlertKind, AlertRoute

__all__ = [
    "Destination",
    "destinations_for",
    "redact_target",
    "scrub",
    "target_problem",
]


@dataclass(frozen=True)
class Destination:
    kind: str
    target: str
    route_id: int | None = None
    """The AlertRoute row it came from; None for a default from settings.ALERT_ROUTES."""

    @property
    def redacted(self) -> str:
        return redact_target(kind=self.kind, target=self.target)


def destinations_for(*, severity: str) -> list[Destination]:
    """The enabled AlertRoute rows of the severity; the settings defaults if it has no row."""
    rows = list(AlertRoute.objects.filter(severity=severity).order_by("id"))
    if rows:
        # Rows exist, so staff own this severity: a disabled row silences, it does not fall back.
        return [Destination(r.kind, r.target, r.id) for r in rows if r.enabled]
    return [Destination(d["kind"], d["target"]) for d in settings.ALERT_ROUTES.get(severity, [])]


def redact_target(*, kind: str, target: str) -> str:
    """Enough to recognise a destination, not enough to use it."""
    if kind == AlertKind.EMAIL:
        # Addresses are not credentials, and operators need to see who was mailed.
        return target
    if kind in (AlertKind.SLACK, AlertKind.WEBHOOK):
        host = urlparse(target).hostname or "?"
        return f"{host}/…"
    return f"…{target[-4:]}" if len(target) > 8 else "…"


def scrub(text: str, *, target: str) -> str:
    """Remove a target (and, for a URL, its path and query) from a message before storing it."""
    secrets = {target}
    parsed = urlparse(target)
    if parsed.scheme in ("http", "https"):
        secrets.update(p for p in (parsed.path, parsed.query) if len(p) > 1)
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def target_problem(*, kind: str, target: str) -> str:
    """What is wrong with a target for its kind, without repeating the target; "" if nothing."""
    target = target.strip()
    if not target:
        return "A target is required."
    if kind in (AlertKind.SLACK, AlertKind.WEBHOOK):
        parsed = urlparse(target)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return "Enter an http(s) URL."
    if kind == AlertKind.EMAIL:
        addresses = [a.strip() for a in target.split(",") if a.strip()]
        if not addresses or not all("@" in a for a in addresses):
            return "Enter comma-separated email addresses."
    if kind == AlertKind.PAGERDUTY and (len(target) < 8 or any(c.isspace() for c in target)):
        return "Enter the integration's routing key (32 characters, no spaces)."
    return ""
