import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from api.errors import Conflict
from jobs.admin_filters import TagListFilter
from jobs.breaker import breaker_close
from jobs.models import LlmJob, ProviderBreaker
from jobs.services import job_cancel
from llmops.admin import ReadOnlyAdmin
from tracing.admin_cells import job_timeline_cell
from webhooks.admin import deliveries_cell
from webhooks.models import Subject

_FIRST = ["id", "user", "feature", "model", "status", "timeline"]


@admin.register(LlmJob)
class LlmJobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "feature",
        "model",
        "served_by",
        "status",
        "attempts",
        "cost_usd",
        "created_at",
        "user",
    ]
    list_filter = ["status", "feature", "model", TagListFilter]
    search_fields = ["=id", "idempotency_key"]
    list_select_related = ["user"]
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in LlmJob._meta.fields] + [
        "timeline",
        "sent_messages",
        "webhooks",
    ]
    # The timeline under the status, where staff look first; then every column as it is.
    fields = [
        *_FIRST,
        *(f.name for f in LlmJob._meta.fields if f.name not in _FIRST),
        "sent_messages",
        "webhooks",
    ]
    actions = ["cancel_jobs"]

    @admin.display(description="timeline")
    def timeline(self, job: LlmJob) -> str:
        """Its attempts, waits and costs from its rows: the spans of its trace (tracing/)."""
        return job_timeline_cell(job)

    @admin.display(description="messages sent")
    def sent_messages(self, job: LlmJob) -> str:
        """An agent turn's transcript, rebuilt from its run (its row stores only messages_ref)."""
        if job.pruned_at is not None:
            return f"(pruned at {job.pruned_at:%Y-%m-%d %H:%M} UTC)"
        if job.messages_ref is None:
            return "(the messages above)"
        return json.dumps(job.request_messages, indent=1, ensure_ascii=False)

    @admin.display(description="webhooks")
    def webhooks(self, job: LlmJob) -> str:
        """Its final states POSTed to its callback_url, linked to the delivery log."""
        return deliveries_cell(subject_kind=Subject.JOB, subject_id=job.id)

    @admin.action(
        description="Cancel the selected jobs (a running one's stream is closed)",
        permissions=["change"],
    )
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[LlmJob]) -> None:
        waiting = running = final = 0
        for job in queryset.select_related(None).only("id", "status"):
            try:
                job = job_cancel(job=job, running=True)
            except Conflict:
                final += 1
                continue
            if job.status == LlmJob.Status.RUNNING:
                running += 1
            else:
                waiting += 1
        parts = [f"{waiting} cancelled"]
        if running:
            parts.append(f"{running} running: their workers close the streams within seconds")
        if final:
            parts.append(f"{final} already finished, left as they were")
        self.message_user(
            request,
            "; ".join(parts) + ".",
            messages.SUCCESS if waiting or running else messages.WARNING,
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[LlmJob]:
        queryset = super().get_queryset(request)
        if request.resolver_match and (request.resolver_match.url_name or "").endswith(
            "_changelist"
        ):
            # The list shows none of the request or the answer: leave the large columns unread.
            queryset = queryset.defer(*LlmJob.REQUEST_FIELDS, "output_text", "error_message")
        return queryset

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        # Jobs are submitted through the API so that validation and enqueueing always happen.
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        # The ledger references jobs; money history is never deleted.
        return False


@admin.register(ProviderBreaker)
class ProviderBreakerAdmin(ReadOnlyAdmin):
    """Staff see whether dispatch is stopped and why, and close the breaker once the account is
    fixed (a new key, credits bought): the jobs it held are enqueued at once."""

    list_display = [
        "provider",
        "state",
        "reason_code",
        "opened_at",
        "opened_by_job",
        "next_probe_at",
        "probes",
        "closed_at",
        "closed_by",
    ]
    actions = ["close_breaker"]

    @admin.action(description="Close the breaker (resume dispatch)", permissions=["close"])
    def close_breaker(self, request: HttpRequest, queryset: QuerySet[ProviderBreaker]) -> None:
        closed = 0
        for breaker in queryset:
            closed += breaker_close(
                provider=breaker.provider,
                by=request.user,  # type: ignore[arg-type]
                reason="closed from the admin",
            )
        self.message_user(
            request,
            f"Closed {closed} breaker(s); held jobs are being enqueued."
            if closed
            else "Nothing to close: the selected breakers were not open.",
            messages.SUCCESS if closed else messages.WARNING,
        )

    def has_close_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("jobs.close_providerbreaker")
