"""Admin of the alerts app: alert routing and history (alerts), and the heartbeats of the
long-running loops (loops). The DLQ console lives in dlq/admin/."""

from alerts.admin import alerts, loops

__all__ = ["alerts", "loops"]
