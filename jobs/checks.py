"""System checks of the job path's settings (tag ``settings``, see llmops/checks.py)."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, register

from api.throttle_rates import parse_rate
from jobs.leases import lease_seconds, lock_ttl
from llmops.checks import SETTINGS, errors

__all__ = ["lease_problems", "read_timeout_problems", "throttle_rate_problems"]


def read_timeout_problems(*, read_timeout: float, job_timeout: float) -> list[str]:
    if read_timeout >= job_timeout:
        return ["LLM_STREAM_IDLE_SECONDS must stay below LLM_JOB_TIMEOUT"]
    return []


def throttle_rate_problems(rate: str, name: str = "LLM_SUBMIT_THROTTLE_RATE") -> list[str]:
    try:
        parse_rate(rate)
    except ValueError as exc:
        return [f"{name}: {exc}"]
    return []


def lease_problems() -> list[str]:
    """A lease that outlives the lock's ttl or the stale threshold would let the reconciler take
    a job over while its cut-off worker still calls (jobs/heartbeat.py, jobs/leases.py)."""
    lease, ttl, stale = lease_seconds(), lock_ttl(), settings.LLM_STALE_AFTER_SECONDS
    beat = settings.LLM_HEARTBEAT_SECONDS
    if lease >= min(ttl, stale) or lease < beat:
        return [
            f"the self-fencing lease ({lease:g} s: LLM_LEASE_SECONDS, or derived) must be at "
            f"least LLM_HEARTBEAT_SECONDS ({beat:g}) and below the job lock's ttl ({ttl} s: "
            f"four beats) and LLM_STALE_AFTER_SECONDS ({stale:g})"
        ]
    return []


@register(SETTINGS)
def check_job_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    return [
        *errors(
            "jobs.E001",
            read_timeout_problems(
                read_timeout=settings.LLM_STREAM_IDLE_SECONDS,
                job_timeout=settings.LLM_JOB_TIMEOUT,
            ),
        ),
        *errors("jobs.E002", throttle_rate_problems(settings.LLM_SUBMIT_THROTTLE_RATE)),
        *errors("jobs.E003", lease_problems()),
    ]
