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

from typing import Any, Protocol

from django.urls import reverse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

__all__ = ["IDEMPOTENCY_KEY_HEADER", "Submitted", "accepted_response", "idempotency_key"]

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
