"""A front door's errors, one neutral shape (``GatewayError``) that each door renders in its own
API's words (gateway/anthropic_shapes.py, gateway/openai_shapes.py), with the status that makes
the official SDK raise its own class: 400 BadRequestError, 401 AuthenticationError, 403
PermissionDeniedError, 404 NotFoundError, 409 ConflictError, 429 RateLimitError, 5xx
InternalServerError (529: Anthropic's OverloadedError).

Two sources: a refusal before any job exists (``from_application_error``: the key, the body,
a budget, the model), and a job that ended without an answer (``from_job``: the provider's last
error class after our retries, or our own reason). A job's end is final for its
``Idempotency-Key``, so those answers say ``x-should-retry: false``: an SDK retry would only be
answered the same job again."""

from dataclasses import dataclass, field

from api.errors import ApplicationError
from jobs.models import LlmJob

__all__ = ["GatewayError", "from_application_error", "from_job", "unauthenticated"]

KINDS = (
    "invalid_request",
    "authentication",
    "permission",
    "not_found",
    "conflict",
    "request_too_large",
    "rate_limit",
    "api_error",
    "overloaded",
    "timeout",
)
"""The neutral kinds a door maps to its API's error types."""

_KIND_OF_STATUS = {
    400: "invalid_request",
    401: "authentication",
    403: "permission",
    404: "not_found",
    409: "conflict",
    413: "request_too_large",
    429: "rate_limit",
    504: "timeout",
    529: "overloaded",
}


def kind_of_status(status: int) -> str:
    return _KIND_OF_STATUS.get(status, "api_error" if status >= 500 else "invalid_request")


@dataclass
class GatewayError(Exception):
    status: int
    message: str
    kind: str = ""
    code: str = ""
    """llmops's own code (``budget_exceeded``, ``unknown_model``, a job's reason code)."""
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kind = self.kind or kind_of_status(self.status)
        super().__init__(self.message)


def unauthenticated(message: str) -> GatewayError:
    return GatewayError(401, message, code="authentication_failed")


def from_application_error(exc: ApplicationError) -> GatewayError:
    """A refusal of the call before it became a job (or the replay of a key with another body)."""
    detail = exc.detail if isinstance(exc.detail, dict) else {}
    status = exc.status_code
    if exc.code == "unknown_model" and "models" in detail:
        # The provider's answer to a model it does not have; a missing or malformed model
        # stays a 400, as the provider's "model: Field required" is.
        status = 404
    headers = {k: v for k, v in exc.headers.items() if k.lower() == "retry-after"}
    field_name = detail.get("field")
    return GatewayError(
        status,
        exc.message,
        code=exc.code,
        param=field_name if isinstance(field_name, str) else None,
        headers=headers,
    )


# A job's reason code -> the status the client sees, where it is not the provider's own status.
_STATUS_OF_REASON = {
    "rate_limited": 429,
    "spend_cap": 429,
    "insufficient_quota": 429,
    "overloaded": 529,
    "budget_exceeded": 429,
    "max_cost_exceeded": 429,
    # The provider refused llmops's own account (its key, its credit): not the caller's key.
    "authentication_failed": 502,
    "payment_required": 502,
    "permission_denied": 502,
    "credit_balance": 502,
    "usage_limit": 502,
    "connection_error": 502,
    "connection_dropped": 502,
    "read_timeout": 504,
    "deadline_exceeded": 504,
    "worker_lost": 500,
    "unexpected_error": 500,
    "context_too_long": 400,
    "request_too_large": 413,
    "not_found": 404,
    "invalid_request": 400,
}


def from_job(job: LlmJob) -> GatewayError:
    """The error of a job that ended failed or cancelled."""
    no_retry = {"x-should-retry": "false"}
    if job.status == LlmJob.Status.CANCELLED:
        return GatewayError(
            409,
            f"Job {job.id} was cancelled before it answered (its client hung up, or it was "
            "cancelled in the job API); send a new Idempotency-Key to run the call again.",
            kind="invalid_request",
            code="cancelled",
            headers=no_retry,
        )
    reason = job.error_code or "unexpected_error"
    # A server error keeps the provider's own status (500, 502, 503...).
    status = _STATUS_OF_REASON.get(reason) or job.error_http_status or 500
    attempts = "attempt" if job.attempts == 1 else "attempts"
    message = (
        f"{job.error_message or reason} (job {job.id}, failed after {job.attempts} {attempts})"
    )
    return GatewayError(status, message, code=reason, headers=no_retry)
