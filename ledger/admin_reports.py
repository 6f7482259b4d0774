"""The cost report in the admin: a page with the API's filters and a CSV download of it.

Mixed into ``CostEntryAdmin``, so it answers at ``/admin/ledger/costentry/report/`` (and
``report/csv/``) to staff who may view ledger rows, and the ledger's changelist links to it.
"""

import csv
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from api.errors import ApplicationError
from ledger.reports import REPORT_COLUMNS, report_csv_rows
from ledger.selectors import (
    REPORT_GROUPS,
    CostReport,
    cost_report,
    report_range_parse,
    report_user_find,
)

__all__ = ["CostReportAdminMixin"]

FILTERS = ["group_by", "since", "until", "feature", "model", "user"]
"""The query parameters of the page and of its CSV, the same as the API's."""

HEADERS = {
    "feature": "Feature",
    "model": "Model",
    "user": "User",
    "day": "Day (UTC)",
    "key": "API key",
    "jobs": "Jobs",
    "attempts": "Attempts",
    "input_tokens": "Input tokens",
    "output_tokens": "Output tokens",
    "cache_write_5m_tokens": "Cache writes (5 min)",
    "cache_write_1h_tokens": "Cache writes (1 h)",
    "cache_read_tokens": "Cache reads",
    "cost_usd": "Cost (USD)",
    "failures": "Failures (DLQ)",
    "batch_saved_usd": "Saved by deferred work (USD)",
}
"""The page's column headings; the CSV keeps the snake_case names, which scripts read."""


def report_headers(group_by: str) -> list[str]:
    return [HEADERS.get(name, name) for name in (group_by, *REPORT_COLUMNS)]


def report_from_query(query: Any) -> CostReport:
    """The report the page's filters ask for; bad filters raise ``invalid_filter``."""
    since, until = report_range_parse(since=query.get("since"), until=query.get("until"))
    user = report_user_find(value=query["user"]) if query.get("user") else None
    return cost_report(
        group_by=query.get("group_by") or REPORT_GROUPS[0],
        since=since,
        until=until,
        user=user,
        feature=query.get("feature") or None,
        model=query.get("model") or None,
    )


class CostReportAdminMixin(admin.ModelAdmin):
    def get_urls(self) -> list[URLPattern]:
        custom = [
            path(
                "report/",
                self.admin_site.admin_view(self.cost_report_view),
                name="ledger_costentry_report",
            ),
            path(
                "report/csv/",
                self.admin_site.admin_view(self.cost_report_csv_view),
                name="ledger_costentry_report_csv",
            ),
        ]
        return custom + super().get_urls()

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        report_url = reverse("admin:ledger_costentry_report")
        extra_context = {**(extra_context or {}), "cost_report_url": report_url}
        return super().changelist_view(request, extra_context)

    def _check_report_permission(self, request: HttpRequest) -> None:
        # The report shows every user's spend: the same right as reading the ledger's rows.
        if not self.has_view_permission(request):
            raise PermissionDenied

    def cost_report_view(self, request: HttpRequest) -> TemplateResponse:
        self._check_report_permission(request)
        report, error = None, None
        try:
            report = report_from_query(request.GET)
        except ApplicationError as exc:
            error = exc.message
        query = {name: request.GET.get(name, "") for name in FILTERS}
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Cost report",
            "groups": REPORT_GROUPS,
            "query": query,
            "error": error,
            "report": report,
            "headers": report_headers(report.group_by) if report else [],
            "lines": report_csv_rows(report) if report else [],
            "csv_url": reverse("admin:ledger_costentry_report_csv")
            + (f"?{request.GET.urlencode()}" if request.GET else ""),
        }
        return TemplateResponse(request, "admin/ledger/costentry/cost_report.html", context)

    def cost_report_csv_view(self, request: HttpRequest) -> HttpResponse:
        self._check_report_permission(request)
        try:
            report = report_from_query(request.GET)
        except ApplicationError as exc:
            return HttpResponse(exc.message, status=400, content_type="text/plain")
        # The range is UTC already (report_range_parse).
        name = f"costs-by-{report.group_by}-{report.since:%Y%m%d}-{report.until:%Y%m%d}.csv"
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        csv.writer(response).writerows(report_csv_rows(report))
        return response
