"""The writes of a front-door call, each a plain sync function (the async views run them off the
event loop, gateway/calls.py): who calls (an llmops API key), the call submitted as an ordinary
job through ``job_submit`` (so the ledger, budgets, limiter, retries, fallbacks, DLQ, deadlines
and live events apply as to any job), and the cancel of a call whose client hung up."""

import logging
from typing import Any, cast
from uuid import UUID

from django.contrib.auth.models import User
from django.http import HttpRequest
from rest_framework.request import Request
from rest_framework.views import APIView

from api.errors import ApplicationError, Conflict
from api.submit_throttles import SubmitThrottle
from gateway.errors import GatewayError, unauthenticated
from gateway.headers import DEFAULT_FEATURE, CallOptions
from jobs.models import LlmJob
from jobs.services import job_cancel, job_submit
from jobs.validation import JobRequest, validate_job_request
from keys.models import ApiKey
from keys.permissions import InsufficientScope
from keys.services import KeyRefused, api_key_authenticate
from ledger.selectors import price_for_model, unknown_model_error
from providers.registry import provider_for

__all__ = [
    "call_authenticate",
    "call_count_tokens",
    "call_hung_up",
    "call_submit",
    "call_throttle",
    "secret_of",
]

logger = logging.getLogger(__name__)


def secret_of(request: HttpRequest) -> str | None:
    """The API key a call carries: ``x-api-key`` (the anthropic SDK's) or ``Authorization:
    Bearer`` (the openai SDK's)."""
    given = request.headers.get("x-api-key", "").strip()
    if given:
        return given
    scheme, _, value = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() in ("bearer", "token") and value.strip():
        return value.strip()
    return None


def call_authenticate(*, secret: str | None, scope: str) -> ApiKey:
    """The key of ``secret`` if it holds ``scope``: 401 for no key or a refused one, 403 for a
    key without the scope. The secret is never repeated in a message or a log."""
    if not secret:
        raise unauthenticated(
            "No API key: send your llmops API key as x-api-key or Authorization: Bearer."
        )
    try:
        key = api_key_authenticate(secret=secret)
    except KeyRefused as refused:
        raise unauthenticated(str(refused)) from None
    if scope not in key.scopes:
        error = InsufficientScope(scope, key.scopes)
        raise GatewayError(403, error.message, code=error.code)
    return key


def call_throttle(*, request: HttpRequest, key: ApiKey) -> None:
    """The submit rate every endpoint that creates work shares (api/submit_throttles.py): the
    user's, and the key's own ``rpm``."""
    drf_request = Request(request)
    drf_request.user, drf_request.auth = key.user, key
    throttle = SubmitThrottle()
    try:
        allowed = throttle.allow_request(drf_request, cast(APIView, None))
    except ApplicationError as exc:
        raise GatewayError(
            exc.status_code, exc.message, code=exc.code, headers=dict(exc.headers)
        ) from None
    if not allowed:
        wait = int(throttle.wait() or 1)
        raise GatewayError(
            429,
            f"Too many calls: this user's submit rate is spent; try again in {wait} s.",
            code="throttled",
            headers={"retry-after": str(wait)},
        )


def call_submit(*, key: ApiKey, request: JobRequest, options: CallOptions) -> tuple[LlmJob, bool]:
    """The call as a job of ``key``'s user (``job_submit``: validated, priced, budgets checked,
    enqueued on commit; with ``LLM-Callback-URL``, its final state POSTed there). A repeated
    ``Idempotency-Key`` returns the first job (False)."""
    return job_submit(
        user=cast(User, key.user),
        request=request,
        idempotency_key=options.idempotency_key,
        api_key_id=key.id,
        callback_url=options.callback_url,
    )


def call_hung_up(*, job_id: UUID) -> LlmJob | None:
    """The client of a call went away before its answer: cancel the job as the job API's cancel
    does (a waiting job at once; a running one's worker closes its stream and books what
    streamed). None when it had ended already."""
    job = LlmJob.objects.filter(id=job_id).first()
    if job is None or job.is_final:
        return job
    try:
        job = job_cancel(job=job, running=True)
    except Conflict:
        return None  # it ended meanwhile: its answer stays readable in the job API
    logger.info(
        "job %s: its front-door client hung up; cancelled (%s)",
        job_id,
        job.status,
        extra={"job_id": str(job_id)},
    )
    return job


def call_count_tokens(*, body: dict[str, Any]) -> int:
    """The input tokens of a Messages body, counted by its model's provider where the provider
    has a count (the Anthropic API); no job, nothing booked. The body is checked as a job's is."""
    request = validate_job_request({"feature": DEFAULT_FEATURE, "max_tokens": 1, **body})
    if price_for_model(model=request.model) is None:
        raise unknown_model_error(request.model)
    provider = provider_for(request.model)
    count = getattr(provider, "count_tokens", None)
    if count is None:
        raise GatewayError(
            400,
            f"{request.model} runs on the provider {provider.name}, which has no token count.",
            code="not_supported",
            param="model",
        )
    outcome = count(body)
    if outcome.kind != "success":
        status = outcome.http_status or 502
        raise GatewayError(status, outcome.message or outcome.kind, code="provider_error")
    return int(outcome.usage["input_tokens"])
