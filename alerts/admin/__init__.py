"""Admin of the alerts app: the DLQ console (failures), its bulk requeues (bulk) and alert
routing and history (alerts)."""

from alerts.admin import alerts, bulk, failures

__all__ = ["alerts", "bulk", "failures"]
