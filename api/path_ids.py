"""The id in an API path: a malformed one is as missing as an unknown one (``404``)."""

import uuid

from api.errors import NotFound

__all__ = ["uuid_or_not_found"]


def uuid_or_not_found(value: str, *, message: str, code: str) -> uuid.UUID:
    """The path id as a UUID; anything else is as missing as an unknown id (``404 code``)."""
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise NotFound(message, code=code) from exc
