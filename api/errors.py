"""One error root for the project and the one DRF exception handler that renders it.

Every error body is ``{"code": ..., "message": ..., "detail": ...}`` with a stable ``code``.
"""

import logging
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.csrf import csrf_failure as django_csrf_failure
from django.views.defaults import page_not_found
from redis.exceptions import RedisError
from rest_framework import exceptions as drf_exceptions
from rest_framework import status
from rest_framework.response import Response

logger = logging.getLogger(__name__)

SERVICE_UNAVAILABLE_RETRY_AFTER = 5
"""Seconds a client is told to wait after a 503: outages of the database are usually short."""


class ApplicationError(Exception):
    """A failure with a stable code that clients may branch on."""

    code: str = "application_error"
    status_code: int = status.HTTP_400_BAD_REQUEST
    default_message = "The request could not be processed."

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        detail: Any = None,
        status_code: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.message = message or self.default_message
        self.headers = headers or {}
        if code is not None:
            self.code = code
        if status_code is not None:
            self.status_code = status_code
        self.detail = detail
        super().__init__(self.message)


class ValidationFailed(ApplicationError):
    status_code = status.HTTP_400_BAD_REQUEST
    code = "invalid_request"


class NotFound(ApplicationError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "not_found"
    default_message = "Not found."


class Conflict(ApplicationError):
    status_code = status.HTTP_409_CONFLICT
    code = "conflict"


class LimitExceeded(ApplicationError):
    """A limit the caller hit (a spent budget); ``Retry-After`` says when it lifts."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    code = "limit_exceeded"


class RequestTooLarge(ApplicationError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    code = "request_too_large"


_DRF_CODES = {
    drf_exceptions.NotAuthenticated: "not_authenticated",
    drf_exceptions.AuthenticationFailed: "authentication_failed",
    drf_exceptions.PermissionDenied: "permission_denied",
    drf_exceptions.NotFound: "not_found",
    drf_exceptions.MethodNotAllowed: "method_not_allowed",
    drf_exceptions.NotAcceptable: "not_acceptable",
    drf_exceptions.UnsupportedMediaType: "unsupported_media_type",
    drf_exceptions.ParseError: "malformed_json",
    drf_exceptions.Throttled: "throttled",
    drf_exceptions.ValidationError: "invalid_request",
}


def _body(code: str, message: str, detail: Any = None) -> dict[str, Any]:
    return {"code": code, "message": message, "detail": detail}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    # Imported here: rest_framework.views loads the parser settings, which import this module.
    from rest_framework.views import set_rollback

    if isinstance(exc, ApplicationError):
        set_rollback()
        return Response(
            _body(exc.code, exc.message, exc.detail), status=exc.status_code, headers=exc.headers
        )
    if isinstance(exc, OperationalError | InterfaceError | RedisError):
        # The database (or Redis, where a request needs it) is unreachable: nothing was written
        # (the request's transaction rolled back), so the client can safely retry.
        logger.error("service unavailable: %s: %s", type(exc).__name__, exc)
        set_rollback()
        return Response(
            _body(
                "service_unavailable",
                "A backing service is unavailable; nothing was saved. Retry shortly.",
            ),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(SERVICE_UNAVAILABLE_RETRY_AFTER)},
        )
    if isinstance(exc, RequestDataTooBig):
        set_rollback()
        return Response(
            _body("request_too_large", "The request body is too large."),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    if not isinstance(exc, drf_exceptions.APIException):
        return None

    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), None)
    if code is None:
        code = str(exc.default_code)
    if isinstance(exc, drf_exceptions.ValidationError):
        message, detail = "The request is invalid.", exc.detail
    else:
        message, detail = str(exc.detail), None

    headers = {}
    if auth_header := getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = auth_header
    if wait := getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(wait))
    set_rollback()
    return Response(_body(code, message, detail), status=exc.status_code, headers=headers)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """``CSRF_FAILURE_VIEW``: a session write without its CSRF token. Under ``/api/`` (a path no
    API view serves: DRF views check CSRF themselves) the API's error body, as DRF words it;
    elsewhere Django's page."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            _body("permission_denied", f"CSRF Failed: {reason}"), status=status.HTTP_403_FORBIDDEN
        )
    return django_csrf_failure(request, reason=reason)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The project's ``handler404``: a URL that no view matches (``/api/v1/failures/abc/`` where
    the id must be a number, a path with a typo). Under ``/api/`` it answers the API's own error
    body, as every API error does; elsewhere Django's page."""
    if request.path.startswith("/api/"):
        return JsonResponse(_body("not_found", "Not found."), status=status.HTTP_404_NOT_FOUND)
    return page_not_found(request, exception or Http404())
