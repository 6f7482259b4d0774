"""WebSocket authentication by API key, sent as the subprotocol pair ``token, <key>``.

Browsers cannot set headers on a WebSocket, but they can offer subprotocols; a script sends
``Sec-WebSocket-Protocol: token, <key>``. A valid key sets ``scope["user"]`` (overriding any
session), ``scope["token_auth"]`` and ``scope["api_key_scopes"]``, so the consumer accepts with
the subprotocol ``token`` and checks the key's scopes; a wrong, revoked or expired key leaves
the user anonymous and the connection is refused. The same keys as the HTTP API
(keys/services.py ``api_key_authenticate``): its re-checks close a socket whose key was revoked
or expired since.
"""

from importlib import import_module
from types import SimpleNamespace
from typing import Any

from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.conf import settings
from django.contrib.auth.models import AnonymousUser


@database_sync_to_async
def _credentials_for_key(secret: str) -> tuple[Any, list[str] | None]:
    """The key's user and scopes; anonymous (and no scopes) for a key that may not be used."""
    from keys.services import KeyRefused, api_key_authenticate

    try:
        key = api_key_authenticate(secret=secret)
    except KeyRefused:
        return AnonymousUser(), []
    return key.user, list(key.scopes)


@database_sync_to_async
def _user_for_session(session_key: str | None) -> Any:
    """The session's user as Django's own ``get_user`` finds it on a request: from the session as
    it is now in the store (logged out, expired, or its password changed: anonymous)."""
    from django.contrib.auth import get_user

    engine = import_module(settings.SESSION_ENGINE)
    return get_user(SimpleNamespace(session=engine.SessionStore(session_key)))  # type: ignore[arg-type]


async def current_credentials(scope: Any) -> tuple[Any, list[str] | None]:
    """The socket's user and its key's scopes as of now (None: a session, every scope), found
    again the way they were at connect: by its key (revoked, expired, rotated past its grace, or
    its user deactivated: anonymous) or by its session. Read afresh, so is_active, is_staff,
    permissions and scopes are today's."""
    if scope.get("token_auth"):
        return await _credentials_for_key(scope["subprotocols"][1])
    session = scope.get("session")
    return await _user_for_session(session.session_key if session is not None else None), None


class TokenSubprotocolMiddleware(BaseMiddleware):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        protocols = list(scope.get("subprotocols") or [])
        if len(protocols) >= 2 and protocols[0] == "token":
            user, scopes = await _credentials_for_key(protocols[1])
            scope = dict(scope, user=user, token_auth=True, api_key_scopes=scopes)
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
