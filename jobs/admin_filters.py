"""The jobs admin's tag filter: read from ``JobTag`` and its (tag, job) index."""

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from jobs.models import JobTag, LlmJob

__all__ = ["TagListFilter"]

TAGS_LISTED = 100
"""Tags offered in the sidebar (alphabetical); any other works as ``?tag=`` in the URL."""


class TagListFilter(admin.SimpleListFilter):
    title = "tag"
    parameter_name = "tag"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        tags = JobTag.objects.order_by("tag").values_list("tag", flat=True).distinct()
        return [(tag, tag) for tag in tags[:TAGS_LISTED]]

    def queryset(self, request: HttpRequest, queryset: QuerySet[LlmJob]) -> QuerySet[LlmJob]:
        value = self.value()
        if not value:
            return queryset
        return queryset.filter(tag_rows__tag=value.lower())
