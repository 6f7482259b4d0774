"""Admin of the alerts app: the DLQ console (failures) and alert routing and history (alerts)."""

from alerts.admin import alerts, failures

__all__ = ["alerts", "failures"]
