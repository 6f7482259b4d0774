"""Scopes at request time: which key made the request, and whether its scopes let it in.

Every API view names the scope each of its methods needs::

    class JobListCreateApi(APIView):
        required_scopes = {"GET": JOBS_READ, "POST": JOBS_WRITE}

``HasScope`` (in ``DEFAULT_PERMISSION_CLASSES``, and first in any view's own
``permission_classes``) answers ``403 insufficient_scope`` naming the scope a key lacks. A
session holds every scope (it is the user, signed in); ``None`` lets any key in (``/me/``). A
method a view serves without naming its scope is refused to every key: a forgotten entry fails
closed (and tests/keys/test_scopes.py fails).

A key may always read what it submitted: a view with ``submitter_may_read`` lets a ``GET`` of a
key without ``jobs:read`` through, marked ``submitter_only``, and the run's lookup
(``api/run_views.py``) then answers ``403 insufficient_scope`` for a run another key submitted.
"""

from typing import Any

from rest_framework import status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from api.errors import ApplicationError
from keys.models import ApiKey
from keys.scopes import ADMIN, JOBS_READ

__all__ = [
    "HasScope",
    "InsufficientScope",
    "SUBMITTER_ONLY",
    "check_submitter",
    "UNDECLARED",
    "request_api_key",
    "request_api_key_id",
    "required_scope",
]

UNDECLARED = ADMIN
"""What a method no ``required_scopes`` entry names asks of a key: refused unless it holds admin
(and the view's own permissions still apply)."""


class InsufficientScope(ApplicationError):
    status_code = status.HTTP_403_FORBIDDEN
    code = "insufficient_scope"

    def __init__(self, scope: str, held: list[str]) -> None:
        super().__init__(
            f"This API key lacks the scope {scope}, which this request needs (it holds: "
            f"{', '.join(held) or 'none'}). Use a key with {scope}, or create one "
            "(POST /api/v1/keys/).",
            detail={"required_scope": scope, "scopes": list(held)},
            # RFC 6750's answer to a bearer token that lacks a scope.
            headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'},
        )


SUBMITTER_ONLY = "_llm_submitter_only"
"""The request attribute set when a key without ``jobs:read`` is let in to read its own runs."""


def check_submitter(request: Request, run: Any) -> None:
    """``403 insufficient_scope`` if the request was let in only for its key's own runs and
    ``run`` was submitted by another key (or a session)."""
    key = request_api_key(request)
    if key is not None and getattr(request, SUBMITTER_ONLY, False):
        if getattr(run, "api_key_id", None) != key.id:
            raise InsufficientScope(JOBS_READ, key.scopes)


def request_api_key(request: Request) -> ApiKey | None:
    """The key the request authenticated with; None for a session."""
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, ApiKey) else None


def request_api_key_id(request: Request) -> int | None:
    key = request_api_key(request)
    return key.id if key is not None else None


def required_scope(view: Any, method: str) -> str | None:
    """The scope ``method`` of ``view`` needs (HEAD and OPTIONS: GET's)."""
    declared: dict[str, str | None] = getattr(view, "required_scopes", {})
    method = "GET" if method in ("HEAD", "OPTIONS") and "GET" in declared else method
    return declared.get(method, UNDECLARED)


class HasScope(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        key = request_api_key(request)
        method = request.method or "GET"
        if key is None:
            return True
        if not hasattr(view, method.lower()) and method not in ("HEAD", "OPTIONS"):
            return True  # the view answers 405
        scope = required_scope(view, method)
        if scope is None or scope in key.scopes:
            return True
        if getattr(view, "own_key_needs_no_scope", False) and str(view.kwargs.get("key_id")) == str(
            key.id
        ):
            return True  # a key revoking or rotating itself
        if (
            scope == JOBS_READ
            and method in ("GET", "HEAD")
            and getattr(view, "submitter_may_read", False)
        ):
            setattr(request, SUBMITTER_ONLY, True)  # its own runs only: check_submitter
            return True
        raise InsufficientScope(scope, key.scopes)
