"""What the run-like resources (jobs, batches, pipelines, agent runs) share in their lists: the
filters ``status``, ``feature``, ``tag`` and ``since``, read from the query string and applied
in one place, and their OpenAPI parameters. Each resource's selector starts from its own rows
(whose they are, which columns) and hands them here; submit (``api/submits.py``) and paging
(``api/pagination.py``) are shared the same way.

A filter a resource cannot answer is not offered for it: a pipeline has no feature or tags of
its own (its steps' jobs do)."""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.db.models import Model, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request

from api.errors import ValidationFailed
from api.schema import error_headers, page_responses
from jobs.tags import validate_tag_filter

__all__ = ["RunFilters", "filter_runs", "run_filters", "run_list_parameters", "run_list_responses"]

Row = TypeVar("Row", bound=Model)


@dataclass(frozen=True)
class RunFilters:
    status: str | None = None
    feature: str | None = None
    tag: str | None = None
    since: datetime | None = None
    """Created at or after this moment."""


def _since(value: str | None) -> datetime | None:
    if not value:
        return None
    moment = parse_datetime(value)
    if moment is None:
        raise ValidationFailed(
            "since must be an ISO 8601 datetime (UTC unless it says otherwise), e.g. "
            "2026-12-01T00:00:00Z.",
            code="invalid_filter",
            detail={"field": "since"},
        )
    return moment.replace(tzinfo=UTC) if timezone.is_naive(moment) else moment


def run_filters(request: Request) -> RunFilters:
    """The list filters of a request's query string (each checked where it is applied)."""
    params = request.query_params
    return RunFilters(
        status=params.get("status") or None,
        feature=params.get("feature") or None,
        tag=params.get("tag") or None,
        since=_since(params.get("since")),
    )


def filter_runs(rows: QuerySet[Row], filters: RunFilters, *, statuses: list[str]) -> QuerySet[Row]:
    """``rows`` filtered, newest first; ``400 invalid_filter`` names a bad status or tag."""
    model = rows.model
    if filters.status:
        if filters.status not in statuses:
            raise ValidationFailed(
                f"status must be one of {', '.join(statuses)}.",
                code="invalid_filter",
                detail={"field": "status"},
            )
        rows = rows.filter(status=filters.status)
    if filters.feature and _has_field(model, "feature"):
        rows = rows.filter(feature=filters.feature)
    if (tag := validate_tag_filter(filters.tag)) and _has_field(model, "tag_rows"):
        # The (tag, row) index of the resource's tag table; a row has each tag once.
        rows = rows.filter(tag_rows__tag=tag)
    if filters.since is not None:
        rows = rows.filter(created_at__gte=filters.since)
    return rows.order_by("-created_at", "-id")


def _has_field(model: type[Model], name: str) -> bool:
    return any(field.name == name for field in model._meta.get_fields())


def run_list_parameters(
    statuses: list[str], *, what: str, feature: bool = True, tags: bool = True
) -> list[OpenApiParameter]:
    """The list's filters in the schema, then the error headers."""
    parameters = [OpenApiParameter("status", enum=statuses)]
    if feature:
        parameters.append(OpenApiParameter("feature", str, description=f"Only {what} of it."))
    if tags:
        parameters.append(OpenApiParameter("tag", str, description=f"Only {what} carrying it."))
    parameters.append(
        OpenApiParameter(
            "since", OpenApiTypes.DATETIME, description=f"Only {what} created at or after it."
        )
    )
    return [*parameters, *error_headers()]


def run_list_responses(serializer: Any) -> dict[Any, Any]:
    """A page of the resource's rows, or ``400 invalid_filter``, or a page past the last."""
    return page_responses(serializer, {400: ["invalid_filter"]})
