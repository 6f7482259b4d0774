"""Admin of the alerts app: the DLQ console (failures), its bulk requeues (bulk) and alert
routing and history (alerts), and the heartbeats of the long-running loops (loops)."""

from alerts.admin import alerts, bulk, failures, loops

__all__ = ["alerts", "bulk", "failures", "loops"]
