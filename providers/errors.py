"""What a failed call's answer says went wrong: its reason code, read from the outcome.

Read from the HTTP status and the error body (``error.type``, ``error.details.error_code`` or,
from an OpenAI-compatible API, ``error.code``, the message), never from the SDK's exception
class, whose names moved between releases. What each reason means for the job (retry or
dead-letter, severity) is the retry table's (jobs/retry_policy.py).
"""

import re
from dataclasses import replace

from providers.base import ProviderOutcome

__all__ = ["REASONS", "failure_reason", "name_the_key"]

REASONS = (
    "connection_error",
    "read_timeout",
    "connection_dropped",
    "rate_limited",
    "spend_cap",
    "insufficient_quota",
    "overloaded",
    "server_error",
    "conflict",
    "authentication_failed",
    "payment_required",
    "permission_denied",
    "request_too_large",
    "credit_balance",
    "usage_limit",
    "context_too_long",
    "not_found",
    "invalid_request",
)
"""Every reason code ``failure_reason`` returns."""

# The outcome kinds that name their own reason: the request failed on the way, not in an answer.
_TRANSPORT_KINDS = frozenset({"connection_error", "read_timeout", "connection_dropped"})

_CONTEXT_TOO_LONG = re.compile(
    r"prompt is too long|context (window|length|limit)|too many (input )?tokens", re.I
)
_USAGE_LIMIT = re.compile(r"reached your specified API usage limits", re.I)
_CREDIT_BALANCE = re.compile(r"credit balance is too low", re.I)


def failure_reason(
    *,
    kind: str,
    http_status: int | None = None,
    error_type: str = "",
    error_code: str = "",
    message: str = "",
) -> str:
    """The reason code of a failed call (``ProviderOutcome`` fields), one of ``REASONS``."""
    if kind in _TRANSPORT_KINDS:
        return kind
    status = http_status or 0
    if status == 429:
        if error_code == "enforced_spend_limit_reached":
            return "spend_cap"
        if "insufficient_quota" in (error_code, error_type):
            # OpenAI-compatible: the account is out of credit, not going too fast.
            return "insufficient_quota"
        return "rate_limited"
    if status == 529 or error_type == "overloaded_error":
        return "overloaded"
    if status >= 500 or status == 408:
        return "server_error"
    if status == 409:
        return "conflict"
    if status == 401:
        return "authentication_failed"
    if status == 402:
        return "payment_required"
    if status == 403:
        return "permission_denied"
    if status == 413 or error_type == "request_too_large":
        return "request_too_large"
    if status == 400 and _CREDIT_BALANCE.search(message):
        return "credit_balance"
    if status == 400 and _USAGE_LIMIT.search(message):
        return "usage_limit"
    if status == 400 and _CONTEXT_TOO_LONG.search(message):
        return "context_too_long"
    if status == 404:
        return "not_found"
    return "invalid_request"


def name_the_key(outcome: ProviderOutcome, *, provider: str, api_key_env: str) -> ProviderOutcome:
    """A ``401`` that says which key was refused: the provider row's name and the environment
    variable its key is read from (whether it is set), never the key. The provider's own words
    ("invalid x-api-key") name neither, and an operator with several rows must find which."""
    if outcome.http_status != 401:
        return outcome
    from providers.selectors import provider_api_key

    if not api_key_env:
        sent = "no key: its row names no api_key_env"
    elif provider_api_key(api_key_env=api_key_env):
        sent = f"the key from the environment variable {api_key_env}"
    else:
        sent = f"no key: the environment variable {api_key_env} is not set"
    note = (
        f"The provider {provider!r} refused the key (401); it was sent {sent}. Set a valid key "
        f"there, or change the provider row's api_key_env (admin: Providers; "
        f"manage.py llm_provider)."
    )
    message = f"{outcome.message.rstrip('.')}. {note}" if outcome.message else note
    return replace(outcome, message=message)
