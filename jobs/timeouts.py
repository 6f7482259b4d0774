"""The RQ job timeout of an attempt, scaled from ``max_tokens`` like its call's deadline.

The call's own limits (read timeout, deadline, the largest ``max_tokens``) are the provider's
(providers/limits.py); the RQ job timeout stays above the call's deadline.
"""

import math

from django.conf import settings

from providers.registry import get_provider

__all__ = ["job_timeout_for"]


def job_timeout_for(max_tokens: int) -> int:
    """The RQ job timeout: always above the call's own deadline, so the call's deadline, not
    RQ's kill, ends a slow attempt, and the attempt is recorded."""
    call = get_provider().call_deadline_for(max_tokens)
    return max(settings.LLM_JOB_TIMEOUT, math.ceil(call + settings.LLM_JOB_TIMEOUT_MARGIN))
