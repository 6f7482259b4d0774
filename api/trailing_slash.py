"""``/api/v1/jobs`` serves as ``/api/v1/jobs/``, for every method.

Every API path ends with a slash, and leaving it out is the most likely first mistake. Django's
``APPEND_SLASH`` answers it with a redirect, which clients follow by turning a POST into a GET
(losing the body), and with DEBUG on it raises instead (a 500 with an HTML page). Under
``/api/`` a path without its slash that only exists with one is served as that path, in place.
Anything else under ``/api/`` that no view matches answers the API's JSON 404 (``api_not_found``,
last in ``llmops/urls.py``), with DEBUG on as well as off."""

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from api.errors import not_found

API_PREFIX = "/api/"
CATCH_ALL = "api-not-found"


def _served(path: str, urlconf: str | None) -> bool:
    """Whether a view of its own (not the JSON 404) answers ``path``."""
    try:
        return resolve(path, urlconf).url_name != CATCH_ALL
    except Resolver404:
        return False


def _add_slash(request: HttpRequest) -> None:
    path = request.path_info
    if path.startswith(API_PREFIX) and not path.endswith("/"):
        urlconf = getattr(request, "urlconf", None)
        if not _served(path, urlconf) and _served(path + "/", urlconf):
            request.path_info = path + "/"
            request.path = request.path + "/"


class ApiTrailingSlashMiddleware:
    # Async-capable: under ASGI a sync middleware would run every request below it on a thread
    # that waits for it, and an async view (the front doors', gateway/) would hold that thread
    # while it waits, and would not hear its client hang up.
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.is_async:
            return self._acall(request)
        _add_slash(request)
        response: HttpResponse = self.get_response(request)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        _add_slash(request)
        response: HttpResponse = await self.get_response(request)
        return response


def api_not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Under ``/api/``, a path no view serves: the API's JSON 404 (``handler404`` is not used
    with DEBUG on)."""
    return not_found(request)
