"""The webhook delivery log: every event POSTed to a caller's URL (jobs, agent runs, batches),
its attempts with their status codes and times, the next try, and "deliver again" (the same
service as nothing else: ``webhook_redeliver``). The URL is a secret: only its host is shown."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join

from llmops.admin import ReadOnlyAdmin
from webhooks.models import Subject, WebhookDelivery
from webhooks.selectors import deliveries_admin_url, deliveries_of
from webhooks.services import webhook_redeliver

__all__ = ["WebhookDeliveryAdmin", "deliveries_cell"]

_SUBJECT_PAGES = {
    Subject.JOB: "admin:jobs_llmjob_change",
    Subject.AGENT_RUN: "admin:agents_agentrun_change",
    Subject.BATCH: "admin:batches_batch_change",
}


def deliveries_cell(*, subject_kind: str, subject_id: object) -> str:
    """A job's, run's or batch's webhooks on its own admin page: how many, in which states,
    linked to the log filtered to it; "-" when it has none."""
    states = list(
        deliveries_of(subject_kind=subject_kind, subject_id=subject_id).values_list(
            "state", flat=True
        )
    )
    if not states:
        return "-"
    counts = ", ".join(f"{states.count(state)} {state}" for state in sorted(set(states)))
    url = deliveries_admin_url(subject_kind=subject_kind, subject_id=subject_id)
    return format_html('<a href="{}">{} webhook(s): {}</a>', url, len(states), counts)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "event",
        "subject",
        "destination",
        "state",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "delivered_at",
    ]
    list_filter = ["state", "subject_kind", "event"]
    search_fields = ["=subject_id", "=event_id"]
    date_hierarchy = "created_at"
    actions = ["deliver_again"]
    fields = [
        "event_id",
        "event",
        "subject",
        "destination",
        "signer",
        "state",
        "attempts",
        "last_status_code",
        "last_error",
        "next_attempt_at",
        "created_at",
        "delivered_at",
        "attempt_log",
        "payload",
    ]
    readonly_fields = [str(name) for name in fields]

    def get_queryset(self, request: HttpRequest) -> QuerySet[WebhookDelivery]:
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and (match.url_name or "").endswith("_changelist"):
            # The list shows no body: leave the large columns unread.
            queryset = queryset.defer("payload", "history")
        return queryset

    @admin.display(description="about")
    def subject(self, delivery: WebhookDelivery) -> str:
        label = f"{delivery.get_subject_kind_display()} {delivery.subject_id}"
        try:
            page = _SUBJECT_PAGES[Subject(delivery.subject_kind)]
            url = reverse(page, args=[delivery.subject_id])
        except (KeyError, ValueError, NoReverseMatch):
            return label
        return format_html('<a href="{}">{}</a>', url, label)

    @admin.display(description="to")
    def destination(self, delivery: WebhookDelivery) -> str:
        return delivery.url_redacted

    @admin.display(description="attempts (newest last)")
    def attempt_log(self, delivery: WebhookDelivery) -> str:
        if not delivery.history:
            return "-"
        # Errors are stored scrubbed: they name the host, never the path or query.
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ms</td><td>{}</td></tr>",
            (
                (
                    entry.get("attempt"),
                    entry.get("at"),
                    "ok" if entry.get("ok") else "failed",
                    entry.get("status") or "-",
                    entry.get("ms"),
                    entry.get("error", ""),
                )
                for entry in delivery.history
            ),
        )
        return format_html(
            '<table class="webhook-attempts"><tr><th>#</th><th>at</th><th>outcome</th>'
            "<th>status</th><th>took</th><th>error</th></tr>{}</table>",
            rows,
        )

    @admin.action(description="Deliver the selected webhooks again", permissions=["redeliver"])
    def deliver_again(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        ids = list(queryset.values_list("id", flat=True))
        again = sum(webhook_redeliver(delivery_id=delivery_id) for delivery_id in ids)
        skipped = len(ids) - again
        self.message_user(
            request,
            f"Delivering {again} webhook(s) again"
            + (f"; {skipped} still pending were left to their own attempts." if skipped else "."),
            messages.SUCCESS if again else messages.WARNING,
        )

    def has_redeliver_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("webhooks.redeliver_webhookdelivery")
