"""Who is acting: the request being served (its user and API key, read when a change is
recorded, after DRF has authenticated it), else the management command, else the system.

``request_bound`` binds the request for the request's life; the request log middleware
(llmops/middleware.py) enters it for every request, in the request's own context, which the
sync views asgiref runs on threads get a copy of under ASGI.
"""

import getpass
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from django.http import HttpRequest

__all__ = ["Actor", "current_actor", "request_bound"]

_request: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)


@dataclass(frozen=True)
class Actor:
    source: str
    name: str
    user_id: int | None = None
    api_key_id: int | None = None
    where: str = ""


def _command_actor() -> Actor:
    if Path(sys.argv[0]).name == "manage.py" and len(sys.argv) > 1:
        try:
            who = getpass.getuser()
        except (KeyError, OSError):  # no name for this uid (a container's)
            who = "unknown"
        command = " ".join(sys.argv[1:3])
        return Actor(source="command", name=f"{who} (manage.py {command})"[:200], where=command)
    return Actor(source="system", name="system")


def current_actor() -> Actor:
    request = _request.get()
    if request is None:
        return _command_actor()
    where = f"{request.method} {request.path}"[:300]
    source = "admin" if request.path.startswith("/admin/") else "api"
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return Actor(source=source, name="anonymous", where=where)
    key = getattr(request, "auth", None)
    key_id = getattr(key, "id", None) if type(key).__name__ == "ApiKey" else None
    prefix = getattr(key, "prefix", "")
    name = user.get_username() + (f" (key {key_id}, {prefix}...)" if key_id else "")
    return Actor(source=source, name=name[:200], user_id=user.pk, api_key_id=key_id, where=where)


@contextmanager
def request_bound(request: HttpRequest) -> Iterator[None]:
    """While the request is served (``llmops.middleware.RequestLogMiddleware`` wraps every
    request in it), a change it causes names its user and key."""
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)
