"""Batches in the admin: their progress, links to their jobs and to their dead letters in the DLQ
console, and a cancel action (the same service as the API's cancel)."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from api.errors import ApplicationError
from batches.models import Batch, BatchItem
from batches.services import batch_cancel
from llmops.admin import ReadOnlyAdmin
from webhooks.admin import deliveries_cell
from webhooks.models import Subject
from webhooks.selectors import deliveries_of

__all__ = ["BatchAdmin", "BatchItemAdmin", "progress_bar"]


def progress_bar(batch: Batch) -> str:
    return format_html(
        '<progress class="batch-progress" value="{}" max="{}">{}%</progress> '
        '<span class="batch-percent">{}%</span> ({} / {})',
        batch.done,
        batch.total or 1,
        batch.percent,
        batch.percent,
        batch.done,
        batch.total,
    )


def items_url(batch: Batch, **filters: str) -> str:
    params = {"batch__id__exact": str(batch.id), **filters}
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return f"{reverse('admin:batches_batchitem_changelist')}?{query}"


def failures_url(batch: Batch) -> str:
    return f"{reverse('admin:dlq_failurerecord_changelist')}?batch={batch.id}"


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "name_or_id",
        "user",
        "feature",
        "model",
        "status",
        "progress",
        "completed",
        "failed",
        "cancelled",
        "links",
        "finished_at",
    ]
    list_filter = ["status", "allow_failures", "feature", "model"]
    search_fields = ["=id", "name"]
    list_select_related = ["user"]
    date_hierarchy = "created_at"
    actions = ["cancel_batches"]
    fields = [
        "id",
        "name",
        "user",
        "feature",
        "model",
        "status",
        "progress",
        "total",
        "jobs_total",
        "pending",
        "completed",
        "failed",
        "cancelled",
        "links",
        "allow_failures",
        "callback",
        "created_at",
        "cancel_requested_at",
        "jobs_cancelled_at",
        "finished_at",
    ]
    readonly_fields = [str(name) for name in fields]

    @admin.display(description="batch", ordering="name")
    def name_or_id(self, batch: Batch) -> str:
        return batch.name or str(batch.id)

    @admin.display(description="progress")
    def progress(self, batch: Batch) -> str:
        return progress_bar(batch)

    @admin.display(description="jobs and failures")
    def links(self, batch: Batch) -> str:
        return format_html(
            '<a href="{}">jobs ({})</a> · <a href="{}">failed ({})</a> · '
            '<a href="{}">dead letters</a>',
            items_url(batch, runs_job__exact="1"),
            batch.jobs_total,
            items_url(batch, job__status__exact="failed"),
            batch.failed,
            failures_url(batch),
        )

    @admin.display(description="callback")
    def callback(self, batch: Batch) -> str:
        # The URL is a secret: no page of the admin shows more than its host.
        if not batch.callback_url:
            return "-"
        delivery = deliveries_of(subject_kind=Subject.BATCH, subject_id=batch.id).first()
        if delivery is None:
            return format_html("{} (sent when the batch finishes)", batch.callback_redacted)
        # The error is stored scrubbed: it names the host, never the path or query.
        return format_html(
            "{} · {} · last: {} after {} attempt(s){}",
            batch.callback_redacted,
            deliveries_cell(subject_kind=Subject.BATCH, subject_id=batch.id),
            delivery.state,
            delivery.attempts,
            f" ({delivery.last_error})" if delivery.last_error else "",
        )

    @admin.action(description="Cancel the selected batches", permissions=["cancel"])
    def cancel_batches(self, request: HttpRequest, queryset: QuerySet[Batch]) -> None:
        stopped = 0
        for batch in queryset.filter(status=Batch.Status.RUNNING):
            try:
                batch_cancel(batch=batch)
                stopped += 1
            except ApplicationError as exc:
                self.message_user(request, f"{batch}: {exc.message}", messages.WARNING)
        self.message_user(
            request,
            f"Cancelled {stopped} batch(es); their waiting jobs are being cancelled."
            if stopped
            else "Nothing to cancel: the selected batches were not running.",
            messages.SUCCESS if stopped else messages.WARNING,
        )

    def has_cancel_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("batches.cancel_batch")


@admin.register(BatchItem)
class BatchItemAdmin(ReadOnlyAdmin):
    """A batch's items and their jobs, reached from the batch's page (``?batch__id__exact=``)."""

    list_display = ["index", "batch", "job_link", "job_status", "runs_job", "job_cost"]
    list_filter = ["runs_job", ("job__status", admin.ChoicesFieldListFilter)]
    list_select_related = ["batch", "job"]
    search_fields = ["=job__id"]
    ordering = ["batch", "index"]
    fields = ["batch", "index", "job_link", "job_status", "runs_job"]
    readonly_fields = ["batch", "index", "job_link", "job_status", "runs_job"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[BatchItem]:
        # The list shows none of the jobs' requests or answers: leave their large columns unread.
        return (
            super()
            .get_queryset(request)
            .defer(
                "batch__callback_url",
                "job__messages",
                "job__system",
                "job__metadata",
                "job__output_text",
                "job__error_message",
            )
        )

    @admin.display(description="job")
    def job_link(self, item: BatchItem) -> str:
        url = reverse("admin:jobs_llmjob_change", args=[item.job_id])
        return format_html('<a href="{}">{}</a>', url, item.job_id)

    @admin.display(description="job status", ordering="job__status")
    def job_status(self, item: BatchItem) -> str:
        return item.job.status

    @admin.display(description="job cost", ordering="job__cost_usd")
    def job_cost(self, item: BatchItem) -> str:
        return f"${item.job.cost_usd}"
