"""API token authentication that takes the header most clients send.

DRF's ``TokenAuthentication`` reads only ``Authorization: Token <key>``; HTTP clients, SDKs and
most documentation send ``Bearer <key>``, which then answered "Authentication credentials were
not provided" as if no header had come. Both schemes are accepted for the same keys, and any
other scheme is refused with a message that names the two."""

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.request import Request

SCHEMES = (b"token", b"bearer")


class ApiTokenAuthentication(TokenAuthentication):
    keyword = "Token"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower() not in SCHEMES:
            signed_in = getattr(request._request, "user", None)
            if signed_in is not None and signed_in.is_authenticated:
                return None  # a session with another scheme's header (a proxy's Basic)
            raise exceptions.AuthenticationFailed(
                "Unsupported Authorization scheme: send 'Authorization: Token <key>' "
                "or 'Authorization: Bearer <key>'."
            )
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Invalid Authorization header: send 'Token <key>' or 'Bearer <key>', the key "
                "without spaces."
            )
        try:
            key = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed(
                "Invalid token header: the key must be plain ASCII."
            ) from None
        return self.authenticate_credentials(key)
