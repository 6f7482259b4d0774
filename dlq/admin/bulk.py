"""Bulk requeues ("requeue all matching") in the admin: their list and each one's progress page.

Read-only: a bulk requeue is started from the DLQ console and moved on by its RQ job; its page
reloads itself every 2 s until it is finished or failed.
"""

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from dlq.models import BulkRequeue
from llmops.admin import ReadOnlyAdmin

__all__ = ["BulkRequeueAdmin", "progress_bar"]


def progress_bar(bulk: BulkRequeue) -> str:
    return format_html(
        '<progress class="bulk-progress" value="{}" max="{}">{}%</progress> '
        '<span class="bulk-percent">{}%</span> ({} / {})',
        bulk.processed,
        bulk.total or 1,
        bulk.percent,
        bulk.percent,
        bulk.processed,
        bulk.total,
    )


@admin.register(BulkRequeue)
class BulkRequeueAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "created_by", "description", "progress", "state"]
    list_display_links = ["created_at", "description"]
    list_filter = ["state"]
    list_select_related = ["created_by"]
    fields = [
        "description",
        "model",
        "created_by",
        "created_at",
        "state",
        "progress",
        "total",
        "processed",
        "moved",
        "skipped",
        "started_at",
        "finished_at",
        "last_error",
    ]
    readonly_fields = [str(name) for name in fields]

    @admin.display(description="progress")
    def progress(self, bulk: BulkRequeue) -> str:
        return progress_bar(bulk)

    def get_queryset(self, request: HttpRequest) -> QuerySet[BulkRequeue]:
        # The snapshot of record ids can hold a hundred thousand of them; no page shows it.
        return super().get_queryset(request).defer("record_ids")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Whoever may start one may watch it.
        return request.user.has_perm("dlq.view_bulkrequeue") or request.user.has_perm(
            "dlq.requeue_matching_failurerecord"
        )
