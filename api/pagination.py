"""What every API app's views share: the list pagination and the reading of a UUID path id."""

import uuid

from rest_framework.pagination import PageNumberPagination

from api.errors import NotFound

__all__ = ["Pagination", "uuid_or_not_found"]


class Pagination(PageNumberPagination):
    """``?page=`` and ``?page_size=`` (up to 200) on every list of the API."""

    page_size_query_param = "page_size"
    max_page_size = 200


def uuid_or_not_found(value: str, *, message: str, code: str) -> uuid.UUID:
    """The path id as a UUID; anything else is as missing as an unknown id (``404 code``)."""
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise NotFound(message, code=code) from exc
