"""Where the alerts of a severity go.

Targets are secrets: a destination is shown through ``Destination.redacted``; the checks and the
redaction rules themselves live in ``alerts/targets.py``.
"""

from dataclasses import dataclass

from django.conf import settings

from alerts.models import AlertRoute
from alerts.targets import redact_target

__all__ = ["Destination", "destinations_for"]


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
    # Targets stripped, as AlertRoute stores them (checked by alerts/checks.py).
    defaults = settings.ALERT_ROUTES.get(severity, [])
    return [Destination(d["kind"], d["target"].strip()) for d in defaults]
