"""The live page's fault picker: submit a job that meets a scripted fault of the fake provider.

A newcomer against the fake provider never sees a retry, a cancel or a dead letter: it answers
at once and never fails. The picker submits a job and, before the job reaches the queue, scripts
the fake provider's answers for that job alone (``POST /_fake/faults {"next": [...], "key":
<job id>}``: our workers send the job id as ``Idempotency-Key``, fake_provider/scripts.py).
Scripted inside the submit's transaction, the script is in place before any worker can call;
another user's job never takes it; once spent, the job's later calls (a requeue) succeed.

Development only: with DEBUG on, and only when the provider base URL is the fake provider (it
answers ``GET /_fake/faults`` with its scripts). A base URL that is neither loopback nor
``FAKE_PROVIDER_URL`` is never even asked, and no request here carries the API key: nothing
reaches a real provider. The product never imports the fake provider; this talks to it by HTTP.
"""

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from rest_framework import status

from api.errors import ApplicationError, NotFound, ValidationFailed
from jobs.models import LlmJob
from jobs.services import job_submit

__all__ = ["FAULTS", "Fault", "fake_provider_url", "fault_choices", "live_fault_submit"]

PROBE_SECONDS = 5.0
"""How long one answer of the probe holds: the live page renders without asking each time."""
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True)
class Fault:
    label: str
    help: str
    script: tuple[Any, ...]
    """The fake provider's answers to the job's calls, in order (fake_provider/scripts.py)."""


FAULTS: dict[str, Fault] = {
    "slow": Fault(
        "Slow, then overloaded (time to cancel)",
        "A 3-4 s call answers 529 overloaded; the job waits about 15 s for its retry: press "
        "Cancel. Left alone, its second slow call succeeds.",
        (
            {"answer": "529", "latency_ms": "3000-4000"},
            {"answer": "ok", "latency_ms": "3000-4000"},
        ),
    ),
    "429": Fault(
        "429, then success",
        "The provider rate-limits the first call (retry-after 1 s, every worker pauses); the "
        "retry succeeds: 2 attempts.",
        ("429", "ok"),
    ),
    "529": Fault(
        "529 storm",
        "Overloaded twice: retries after about 15 s and about 60 s (overloads last minutes), "
        "then succeeds: 3 attempts. With a fallback model in the feature's policy, the job "
        "moves there right after the second 529 (served_by shows it).",
        ("529", "529", "ok"),
    ),
    "400": Fault(
        "400: dead letter",
        "A fatal invalid request: no retry, the job fails and lands in the DLQ. Requeue it from "
        "the admin (Failures (DLQ)) and it succeeds: the fault was one-shot.",
        ("400",),
    ),
}

_probed: dict[str, tuple[float, bool]] = {}


def _may_ask(base_url: str) -> bool:
    """Loopback or the configured fake: a real provider's host is never sent a request."""
    fake = getattr(settings, "FAKE_PROVIDER_URL", "").rstrip("/")
    return urlsplit(base_url).hostname in _LOOPBACK or (bool(fake) and base_url == fake)


def _answers_as_fake(base_url: str) -> bool:
    try:
        answer = httpx.get(f"{base_url}/_fake/faults", timeout=1.0)
        described = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return False
    return isinstance(described, dict) and "faults" in described and "script" in described


def fake_provider_url() -> str | None:
    """The provider base URL when the picker may script it (DEBUG on, the fake provider
    answering there), else None."""
    if not settings.DEBUG:
        return None
    base_url = str(getattr(settings, "ANTHROPIC_BASE_URL", "")).rstrip("/")
    if not base_url or not _may_ask(base_url):
        return None
    now = time.monotonic()
    checked = _probed.get(base_url)
    if checked is None or checked[0] <= now:
        checked = (now + PROBE_SECONDS, _answers_as_fake(base_url))
        _probed[base_url] = checked
    return base_url if checked[1] else None


def fault_choices() -> list[dict[str, str]]:
    """The picker's options, or none where the picker is not offered."""
    if fake_provider_url() is None:
        return []
    return [{"id": key, "label": f.label, "help": f.help} for key, f in FAULTS.items()]


class FakeProviderUnavailable(ApplicationError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = "fake_provider_unavailable"
    default_message = "The fake provider did not take the fault; the job was not submitted."


def live_fault_submit(*, user: User, data: Any) -> LlmJob:
    """Submit ``data["job"]`` (the body of ``POST /api/v1/jobs/``) with the fault
    ``data["fault"]`` scripted for it alone. Not offered: 404; the fake provider not taking the
    script: 503 and no job."""
    base_url = fake_provider_url()
    if base_url is None:
        raise NotFound(
            "The fault picker exists only in development (DEBUG on) against the fake provider.",
            code="fault_picker_unavailable",
        )
    if not isinstance(data, dict) or set(data) != {"fault", "job"}:
        raise ValidationFailed('The body is {"fault": <name>, "job": <a job submit body>}.')
    fault = FAULTS.get(data["fault"]) if isinstance(data["fault"], str) else None
    if fault is None:
        raise ValidationFailed(
            f"fault must be one of: {', '.join(FAULTS)}.",
            code="unknown_fault",
            detail={"faults": list(FAULTS)},
        )
    with transaction.atomic():
        # The push to the queue waits for this transaction: the script is in place first.
        job, _ = job_submit(user=user, data=data["job"])
        try:
            httpx.post(
                f"{base_url}/_fake/faults",
                json={"next": list(fault.script), "key": str(job.id)},
                timeout=3.0,
            ).raise_for_status()
        except httpx.HTTPError as exc:
            raise FakeProviderUnavailable(detail={"reason": str(exc)}) from None
    return job
