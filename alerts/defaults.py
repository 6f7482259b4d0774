"""Alerting's settings (routes, deduplication, retries, queue thresholds, the loops' back-off),
each from its environment variable; the settings take them as they are (llmops/settings.py).
In alerts/checks.py: whether each value is right."""

from alerts import targets as alert_targets
from llmops.env import env
from llmops.queues import LLM_QUEUE

__all__ = [
    "ALERT_DEDUP_SECONDS",
    "ALERT_DELIVERY_TIMEOUT",
    "ALERT_KINDS",
    "ALERT_MONITOR_INTERVAL",
    "ALERT_PAGERDUTY_EVENTS_URL",
    "ALERT_QUEUE_CLEAR_RATIO",
    "ALERT_QUEUE_WAIT_THRESHOLDS",
    "ALERT_RETRY_SCHEDULE",
    "ALERT_ROUTES",
    "ALERT_SEVERITIES",
    "ALERT_SOURCE",
    "LOOP_ERROR_BACKOFF_MAX_SECONDS",
    "LOOP_ERROR_BACKOFF_SECONDS",
]

ALERT_SEVERITIES = ("WARNING", "ERROR", "CRITICAL")
ALERT_KINDS = alert_targets.KINDS
ALERT_ROUTES = env.json_value("ALERT_ROUTES", {})  # for a severity with no AlertRoute row at all
ALERT_PAGERDUTY_EVENTS_URL = env.str(
    "ALERT_PAGERDUTY_EVENTS_URL", "https://events.pagerduty.com/v2/enqueue"
)
ALERT_DEDUP_SECONDS = env.integer("ALERT_DEDUP_SECONDS", 600, minimum=0)
ALERT_RETRY_SCHEDULE = env.json_value("ALERT_RETRY_SCHEDULE", [5.0, 30.0, 120.0])
ALERT_DELIVERY_TIMEOUT = env.number("ALERT_DELIVERY_TIMEOUT", 10.0, minimum=0.1)
ALERT_QUEUE_WAIT_THRESHOLDS = env.json_value("ALERT_QUEUE_WAIT_THRESHOLDS", {LLM_QUEUE: 60.0})
# Resolve only under this fraction of the threshold: a queue hovering at it does not flap.
ALERT_QUEUE_CLEAR_RATIO = env.number("ALERT_QUEUE_CLEAR_RATIO", 0.5)
ALERT_MONITOR_INTERVAL = env.number("ALERT_MONITOR_INTERVAL", 15.0, minimum=0.1)
LOOP_ERROR_BACKOFF_SECONDS = env.number("LOOP_ERROR_BACKOFF_SECONDS", 1.0, minimum=0.01)
LOOP_ERROR_BACKOFF_MAX_SECONDS = env.number("LOOP_ERROR_BACKOFF_MAX_SECONDS", 30.0, minimum=0.01)
ALERT_SOURCE = env.str("ALERT_SOURCE", "llmops")  # PagerDuty's payload.source, e.g. llmops-prod
