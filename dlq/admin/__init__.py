"""Admin of the DLQ: the console of dead-lettered jobs (failures) and its bulk requeues (bulk)."""

from dlq.admin import bulk, failures

__all__ = ["bulk", "failures"]
