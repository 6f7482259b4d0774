"""Every list of the API: ``Pagination`` and ``paginated_response``, which pages, serializes and
answers in one call, so that a list view is its filters and one line."""

from collections.abc import Callable, Sequence
from typing import Any

from django.db.models import QuerySet
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView

__all__ = ["Pagination", "paginated_response"]


class Pagination(PageNumberPagination):
    """``?page=`` and ``?page_size=`` (up to 200) on every list of the API."""

    page_size_query_param = "page_size"
    max_page_size = 200


def paginated_response(
    request: Request,
    view: APIView,
    rows: QuerySet[Any] | Sequence[Any],
    serializer_class: type[BaseSerializer],
    *,
    rows_for_page: Callable[[list[Any]], Sequence[Any]] | None = None,
    context_for_page: Callable[[list[Any]], dict[str, Any]] | None = None,
) -> Response:
    """One page of ``rows`` by the view's ``pagination_class``, serialized by
    ``serializer_class``, as ``{"count", "next", "previous", "results"}``; a page past the last
    answers ``404`` (``PAGE_NOT_FOUND`` in the schema).

    What the rows of a page need beyond themselves is read once per page, never per row:
    ``rows_for_page`` turns the page into what is serialized (a budget into its status),
    ``context_for_page`` gives the serializer's context (a batch's item indexes per job)."""
    paginator = view.pagination_class()  # type: ignore[attr-defined]
    page = paginator.paginate_queryset(rows, request, view=view) or []
    instances = rows_for_page(page) if rows_for_page else page
    context = context_for_page(page) if context_for_page else {}
    return paginator.get_paginated_response(
        serializer_class(instances, many=True, context=context).data
    )
