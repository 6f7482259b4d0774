"""The DLQ console: find, understand and requeue dead-lettered jobs."""

from django.contrib import admin, messages

from alerts.models import FailureRecord
from alerts.services import failure_requeue, failure_resolve


@admin.register(FailureRecord)
class FailureRecordAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "severity",
        "reason_code",
        "feature",
        "job_model",
        "http_status",
        "attempts",
        "state",
        "job",
    ]
    list_filter = ["severity", "reason_code", "state", "job__feature", "job__model"]
    search_fields = ["=job__id", "request_id", "message"]
    list_select_related = ["job", "handled_by"]
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in FailureRecord._meta.fields]
    actions = ["requeue", "mark_resolved"]

    @admin.display(ordering="job__feature")
    def feature(self, record: FailureRecord) -> str:
        return record.job.feature

    @admin.display(ordering="job__model", description="model")
    def job_model(self, record: FailureRecord) -> str:
        return record.job.model

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_requeue_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return request.user.has_perm("alerts.requeue_failurerecord")

    def has_resolve_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return request.user.has_perm("alerts.resolve_failurerecord")

    @admin.action(description="Requeue selected jobs (fresh retry budget)", permissions=["requeue"])
    def requeue(self, request, queryset):  # type: ignore[no-untyped-def]
        moved = sum(failure_requeue(record=r, by=request.user) for r in queryset)
        skipped = queryset.count() - moved
        self.message_user(request, f"Requeued {moved} job(s).", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"{skipped} record(s) were not open and were left alone.", messages.WARNING
            )

    @admin.action(description="Mark selected as resolved", permissions=["resolve"])
    def mark_resolved(self, request, queryset):  # type: ignore[no-untyped-def]
        done = sum(failure_resolve(record=r, by=request.user) for r in queryset)
        self.message_user(request, f"Marked {done} record(s) resolved.", messages.SUCCESS)
