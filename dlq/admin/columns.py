"""The DLQ list's columns, short enough that a row fits beside the admin's sidebar and filters at
1,400 px: one-unit ages, short job ids, one-word headers. The detail page keeps the full values
(the exact time, the whole job id, the attempt timeline)."""

from datetime import UTC, timedelta

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from dlq.models import FailureRecord
from ledger.admin_budgets import money

__all__ = ["LIST_COLUMNS", "FailureColumns", "short_age"]

LIST_COLUMNS = ("age", "failure", "feature_model", "tries", "cost_so_far", "state", "job_link")
"""The age links to the record. Short values share a cell, one above the other: severity and HTTP
status over the reason, feature over model (each of them is also a filter on the right)."""


def short_age(age: timedelta) -> str:
    """One unit, abbreviated, with a non-breaking space: "40 s", "13 min", "5 h", "3 d"."""
    seconds = max(0, int(age.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size * (2 if unit == "d" else 1):
            return f"{seconds // size}\N{NO-BREAK SPACE}{unit}"
    return f"{seconds}\N{NO-BREAK SPACE}s"


class FailureColumns:
    """Display methods of the list, mixed into ``FailureRecordAdmin``."""

    @admin.display(ordering="created_at", description="age")
    def age(self, record: FailureRecord) -> SafeString:
        return format_html(
            '<span title="{}">{}</span>',
            f"{record.created_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC",
            short_age(timezone.now() - record.created_at),
        )

    @admin.display(ordering="severity", description="failure")
    def failure(self, record: FailureRecord) -> SafeString:
        # Severities sort CRITICAL, ERROR, WARNING: alphabetical is worst first.
        return format_html(
            '<span class="dlq-meta"><span class="dlq-severity-{}">{}</span>{}</span><br>{}',
            record.severity.lower(),
            record.get_severity_display(),
            f" \N{MIDDLE DOT} HTTP {record.http_status}" if record.http_status else "",
            record.reason_code,
        )

    @admin.display(ordering="job__feature", description="feature / model")
    def feature_model(self, record: FailureRecord) -> SafeString:
        # Each on one line; a name past 14rem ends in an ellipsis, whole in its tooltip.
        return format_html(
            '<span class="dlq-feature" title="{}">{}</span>'
            '<span class="dlq-model" title="{}">{}</span>',
            record.job.feature,
            record.job.feature,
            record.job.model,
            record.job.model,
        )

    @admin.display(ordering="attempts", description="tries")
    def tries(self, record: FailureRecord) -> int:
        return record.attempts

    @admin.display(ordering="job__cost_usd", description="cost")
    def cost_so_far(self, record: FailureRecord) -> str:
        return money(record.job.cost_usd)

    @admin.display(description="job")
    def job_link(self, record: FailureRecord) -> SafeString:
        # The first 8 hex digits tell jobs apart on one page; the search takes the whole id.
        url = reverse("admin:jobs_llmjob_change", args=[record.job_id])
        return format_html(
            '<a href="{}" title="{}">{}</a>', url, record.job_id, str(record.job_id)[:8]
        )
