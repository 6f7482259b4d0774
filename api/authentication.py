"""API key authentication: ``Authorization: Bearer <key>``, and ``Token <key>`` for the clients
written before keys (DRF's scheme, whose tokens the data migration made keys).

The key is looked up by its keyed hash (keys/services.py ``api_key_authenticate``); a revoked
or expired key, or a rotated secret past its grace period, answers 401 at once with a message
that says which, and never repeats the secret. ``request.auth`` is the ``ApiKey``: its scopes
are checked by ``keys.permissions.HasScope``."""

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from keys.services import KeyRefused, api_key_authenticate

SCHEMES = (b"token", b"bearer")


class ApiTokenAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower() not in SCHEMES:
            signed_in = getattr(request._request, "user", None)
            if signed_in is not None and signed_in.is_authenticated:
                return None  # a session with another scheme's header (a proxy's Basic)
            raise exceptions.AuthenticationFailed(
                "Unsupported Authorization scheme: send 'Authorization: Bearer <key>' "
                "(or 'Token <key>')."
            )
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Invalid Authorization header: send 'Bearer <key>' or 'Token <key>', the key "
                "without spaces."
            )
        try:
            secret = header[1].decode("ascii")
        except UnicodeError:
            raise exceptions.AuthenticationFailed(
                "Invalid token header: the key must be plain ASCII."
            ) from None
        try:
            key = api_key_authenticate(secret=secret)
        except KeyRefused as refused:
            raise exceptions.AuthenticationFailed(str(refused)) from None
        return key.user, key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'
