"""System checks of the alert settings (tag ``settings``, see llmops/checks.py).

Errors say where a bad entry is, never what its target is: targets are secrets.
"""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, register

from alerts.targets import target_problem
from llmops.checks import SETTINGS, errors

__all__ = [
    "alert_retry_schedule_problems",
    "alert_route_problems",
    "queue_clear_ratio_problems",
    "queue_wait_threshold_problems",
]


def alert_route_problems(routes: Any, name: str = "ALERT_ROUTES") -> list[str]:
    """{"<SEVERITY>": [{"kind": ..., "target": ..., "name": ...}, ...]}."""
    if not isinstance(routes, dict):
        return [f"{name} must be a JSON object keyed by severity"]
    severities, kinds = settings.ALERT_SEVERITIES, settings.ALERT_KINDS
    problems = []
    for severity, destinations in routes.items():
        if severity not in severities:
            problems.append(f"{name}: unknown severity {severity!r}; use {', '.join(severities)}")
        elif not isinstance(destinations, list):
            problems.append(f"{name}[{severity}] must be a list of destinations")
        else:
            for index, destination in enumerate(destinations):
                where = f"{name}[{severity}][{index}]"
                if not isinstance(destination, dict) or set(destination) - {
                    "kind",
                    "target",
                    "name",
                }:
                    problems.append(f"{where} must be an object with kind, target, name")
                    continue
                kind, target = destination.get("kind"), destination.get("target")
                if kind not in kinds:
                    problems.append(f"{where}: unknown kind {kind!r}; use {', '.join(kinds)}")
                elif not isinstance(target, str) or not target.strip():
                    problems.append(f"{where}: target must be a non-empty string")
                elif problem := target_problem(kind=kind, target=target):
                    problems.append(f"{where}: bad {kind} target: {problem}")
    return problems


def alert_retry_schedule_problems(schedule: Any, name: str = "ALERT_RETRY_SCHEDULE") -> list[str]:
    if not isinstance(schedule, list) or not all(_seconds(value) for value in schedule):
        return [f"{name} must be a JSON list of seconds, e.g. [5, 30, 120]"]
    return []


def queue_wait_threshold_problems(
    thresholds: Any, name: str = "ALERT_QUEUE_WAIT_THRESHOLDS"
) -> list[str]:
    if not isinstance(thresholds, dict):
        return [f"{name} must be a JSON object: {{queue: seconds}}"]
    problems = []
    for queue, seconds in thresholds.items():
        if queue not in settings.RQ_QUEUES:
            problems.append(f"{name}: unknown queue {queue!r}; see RQ_QUEUES")
        elif not _seconds(seconds):
            problems.append(f"{name}[{queue}] must be a number of seconds >= 0")
    return problems


def queue_clear_ratio_problems(ratio: float, name: str = "ALERT_QUEUE_CLEAR_RATIO") -> list[str]:
    # 0 would never clear while a job waits; above 1 would clear while still over the threshold.
    if not 0 < ratio <= 1:
        return [f"{name} must be over 0 and at most 1, not {ratio}"]
    return []


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


@register(SETTINGS)
def check_alert_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    return [
        *errors("alerts.E001", alert_route_problems(settings.ALERT_ROUTES)),
        *errors("alerts.E002", alert_retry_schedule_problems(settings.ALERT_RETRY_SCHEDULE)),
        *errors("alerts.E003", queue_wait_threshold_problems(settings.ALERT_QUEUE_WAIT_THRESHOLDS)),
        *errors("alerts.E004", queue_clear_ratio_problems(settings.ALERT_QUEUE_CLEAR_RATIO)),
    ]
