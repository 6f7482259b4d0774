"""WebSocket authentication by API token, sent as the subprotocol pair ``token, <key>``.

Browsers cannot set headers on a WebSocket, but they can offer subprotocols; a script sends
``Sec-WebSocket-Protocol: token, <key>``. A valid key sets ``scope["user"]`` (overriding any
session) and ``scope["token_auth"]``, so the consumer accepts with the subprotocol ``token``; a
wrong key leaves the user anonymous and the connection is refused.
"""

from typing import Any

from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.contrib.auth.models import AnonymousUser


@database_sync_to_async
def _user_for_key(key: str) -> Any:
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


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
