"""WebSocket authentication by API token, sent as the subprotocol pair ``token, <key>``.

Browsers cannot set headers on a WebSocket, but they can offer subprotocols; a script sends
``Sec-WebSocket-Protocol: token, <key>``. A valid key sets ``scope["user"]`` (overriding any
session) and ``scope["token_auth"]``, so the consumer accepts with the subprotocol ``token``; a
wrong key leaves the user anonymous and the connection is refused.
"""

from importlib import import_module
from types import SimpleNamespace
from typing import Any

from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.conf import settings
from django.contrib.auth.models import AnonymousUser


@database_sync_to_async
def _user_for_key(key: str) -> Any:
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


@database_sync_to_async
def _user_for_session(session_key: str | None) -> Any:
    """The session's user as Django's own ``get_user`` finds it on a request: from the session as
    it is now in the store (logged out, expired, or its password changed: anonymous)."""
    from django.contrib.auth import get_user

    engine = import_module(settings.SESSION_ENGINE)
    return get_user(SimpleNamespace(session=engine.SessionStore(session_key)))  # type: ignore[arg-type]


async def current_user(scope: Any) -> Any:
    """The socket's user as of now, found again the way it was at connect: by its token (deleted,
    or its user deactivated: anonymous) or by its session. The user is read afresh, so is_active,
    is_staff and permissions are today's."""
    if scope.get("token_auth"):
        return await _user_for_key(scope["subprotocols"][1])
    session = scope.get("session")
    return await _user_for_session(session.session_key if session is not None else None)


class TokenSubprotocolMiddleware(BaseMiddleware):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        protocols = list(scope.get("subprotocols") or [])
        if len(protocols) >= 2 and protocols[0] == "token":
            scope = dict(scope, user=await _user_for_key(protocols[1]), token_auth=True)
        return await super().__call__(scope, receive, send)


def token_or_session_ws(inner: Any) -> Any:
    """Token auth for scripts, origin-checked session auth for browsers."""
    from channels.auth import AuthMiddlewareStack
    from channels.security.websocket import AllowedHostsOriginValidator

    token_stack = TokenSubprotocolMiddleware(inner)
    session_stack = AllowedHostsOriginValidator(AuthMiddlewareStack(token_stack))
    return _TokenBypassesOrigin(token_stack, session_stack)


class _TokenBypassesOrigin:
    """A token client (a script) may send no Origin; a cookie session must come from our hosts."""

    def __init__(self, token_app: Any, session_app: Any) -> None:
        self.token_app = token_app
        self.session_app = session_app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        protocols = list(scope.get("subprotocols") or [])
        if len(protocols) >= 2 and protocols[0] == "token":
            return await self.token_app(scope, receive, send)
        return await self.session_app(scope, receive, send)
