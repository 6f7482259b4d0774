"""The answer to a submit: ``202 Accepted`` at once (the work runs later, on a worker), with where
to poll it. Every endpoint that creates work (jobs, batches, pipelines) answers through
``accepted_response``, so the body and the ``Location`` header cannot drift between them::

    def post(self, request):
        job, _created = job_submit(
            user=request.user, data=request.data, idempotency_key=idempotency_key(request)
        )
        return accepted_response(request, job, status_url_name="jobs:job-detail")

The service validates the body and decides what a repeated ``Idempotency-Key`` returns (the
first submit's object, answered the same way).
"""

from collections.abc import Callable
from typing import Any, Protocol, cast

from django.urls import reverse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from keys.permissions import request_api_key_id

__all__ = [
    "IDEMPOTENCY_KEY_HEADER",
    "Submitted",
    "accepted_response",
    "idempotency_key",
    "submit_from_request",
]

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
"""The client's key of a submit: a repeat returns the first object (``IDEMPOTENCY_KEY`` in
api/schema.py documents it)."""


class Submitted(Protocol):
    """What a submit created: a row with an id and a status."""

    @property
    def id(self) -> Any: ...

    @property
    def status(self) -> str: ...


def idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key`` header, unchecked (the service validates it)."""
    return request.headers.get(IDEMPOTENCY_KEY_HEADER)


def accepted_response(request: Request, submitted: Submitted, *, status_url_name: str) -> Response:
    """``202`` with ``{"id", "status", "status_url"}`` and ``Location``: the status URL
    (``status_url_name`` reversed with the object's id), absolute."""
    status_url = reverse(status_url_name, args=[submitted.id])
    return Response(
        {"id": str(submitted.id), "status": submitted.status, "status_url": status_url},
        status=status.HTTP_202_ACCEPTED,
        headers={"Location": request.build_absolute_uri(status_url)},
    )


def submit_from_request(
    request: Request, submit: Callable[..., tuple[Any, bool]], *, status_url_name: str
) -> Response:
    """The whole of a submit view: the run-like resource's service (``job_submit``,
    ``batch_submit``, ``agent_run_create``...) called with the caller, the body, its
    ``Idempotency-Key`` and API key, answered ``202`` by ``accepted_response`` (a repeated key
    answers the first submit's object the same way)."""
    submitted, _created = submit(
        user=cast(Any, request.user),
        data=request.data,
        idempotency_key=idempotency_key(request),
        api_key_id=request_api_key_id(request),
    )
    return accepted_response(request, submitted, status_url_name=status_url_name)
