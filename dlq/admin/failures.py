"""The DLQ console: find, understand and requeue dead-lettered jobs from the Django admin.

Every action calls a service in dlq/services.py, the same one the staff API uses. The list
never loads the large columns it does not show (snapshots, messages, outputs); the detail page
shows them.
"""

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import JSONField, Model, QuerySet, TextField
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from api.errors import ApplicationError
from batches.admin_filters import BatchFilter
from dlq.admin.columns import LIST_COLUMNS, FailureColumns
from dlq.admin.filters import (
    OPEN_FIRST,
    AgeFilter,
    AttemptsFilter,
    CommentForm,
    CostFilter,
    ModelChoiceForm,
    StateFilter,
)
from dlq.models import BulkRequeue, FailureRecord
from dlq.selectors import failure_requeue_estimate
from dlq.services import bulk_requeue_start, failure_close, failure_requeue
from jobs.models import LlmJob
from ledger.selectors import cost_entries_for_job


def large_columns(model: type[Model], prefix: str = "") -> list[str]:
    """The text and JSON columns of a model: a request, an output, a snapshot can each be
    megabytes, and a list of 100 rows never shows them."""
    return [
        f"{prefix}{field.name}"
        for field in model._meta.concrete_fields
        if isinstance(field, TextField | JSONField)
    ]


class FailureChangeList(ChangeList):
    """The DLQ list, its actions and "requeue all matching" read the rows through this queryset:
    without the records' snapshots and messages and without the jobs' requests and outputs."""

    def get_queryset(self, request, exclude_parameters=None):  # type: ignore[no-untyped-def]
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.defer(*large_columns(FailureRecord), *large_columns(LlmJob, "job__"))


@admin.register(FailureRecord)
class FailureRecordAdmin(FailureColumns, admin.ModelAdmin):
    list_display = LIST_COLUMNS
    list_filter = [
        "severity",
        "reason_code",
        ("job__feature", admin.AllValuesFieldListFilter),
        ("job__model", admin.AllValuesFieldListFilter),
        "http_status",
        AttemptsFilter,
        CostFilter,
        AgeFilter,
        StateFilter,
        BatchFilter,
    ]
    ordering = OPEN_FIRST  # type: ignore[assignment]  # expressions are allowed; the stubs say str
    search_fields = ["=job__id", "=request_id", "message"]
    list_select_related = ["job"]
    date_hierarchy = "created_at"
    actions = ["requeue", "requeue_with_model", "resolve", "ignore"]
    fieldsets = [
        (
            "Failure",
            {
                "fields": [
                    "severity",
                    "reason_code",
                    "retries_exhausted",
                    "created_at",
                    "alerted_at",
                    "state",
                    "handled_by",
                    "handled_at",
                    "comment",
                    "requeued_model",
                ]
            },
        ),
        ("Job and outcome", {"fields": ["job_page", "job_outcome", "attempts", "total_cost"]}),
        (
            "Provider error",
            {"fields": ["http_status", "error_type", "message", "request_id"]},
        ),
        ("Attempt timeline", {"fields": ["attempt_timeline"]}),
        ("Request", {"fields": ["request_snapshot_pretty"]}),
    ]
    # The detail page is read-only: records change only through the actions.
    readonly_fields = [str(name) for _, section in fieldsets for name in section["fields"]]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return FailureChangeList

    # --- columns -------------------------------------------------------------------------

    @admin.display(description="job")
    def job_page(self, record: FailureRecord) -> str:
        url = reverse("admin:jobs_llmjob_change", args=[record.job_id])
        return format_html('<a href="{}">{}</a>', url, record.job_id)

    @admin.display(description="job status now")
    def job_outcome(self, record: FailureRecord) -> str:
        job = record.job
        later = (
            FailureRecord.objects.filter(job_id=job.id, created_at__gt=record.created_at)
            .order_by("created_at")
            .first()
        )
        text = f"{job.status} after {job.attempts} attempt(s)"
        if later is not None:
            url = reverse("admin:dlq_failurerecord_change", args=[later.id])
            return format_html('{} &mdash; failed again: <a href="{}">{}</a>', text, url, later)
        return text

    @admin.display(description="total cost")
    def total_cost(self, record: FailureRecord) -> str:
        return f"${record.job.cost_usd}"

    @admin.display(description="attempts (ledger)")
    def attempt_timeline(self, record: FailureRecord) -> str:
        rows = [
            (
                e.attempt,
                e.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                e.outcome,
                e.http_status or "-",
                e.reason_code or "-",
                f"{e.retry_delay_seconds:.1f} s" if e.retry_delay_seconds is not None else "-",
                f"{e.latency_ms} ms" if e.latency_ms is not None else "-",
                f"${e.cost_usd}" + (" (estimated)" if e.is_estimated else ""),
            )
            for e in cost_entries_for_job(job_id=record.job_id)
        ]
        if not rows:
            return "No attempt reached the ledger."
        header = mark_safe(  # a constant, no user data
            "<tr><th>#</th><th>at</th><th>outcome</th><th>status</th><th>reason</th>"
            "<th>retry delay</th><th>latency</th><th>cost</th></tr>"
        )
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td></tr>",
            rows,
        )
        return format_html(
            '<table class="attempt-timeline">{}{}</table><p>Total: <strong>${}</strong></p>',
            header,
            body,
            record.job.cost_usd,
        )

    @admin.display(description="request snapshot")
    def request_snapshot_pretty(self, record: FailureRecord) -> str:
        pretty = json.dumps(record.request_snapshot, indent=2, ensure_ascii=False)
        return format_html('<pre class="request-snapshot">{}</pre>', pretty)

    # --- permissions -----------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Records change only through the actions; the detail page is read-only.
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("dlq.view_failurerecord") or request.user.has_perm(
            "dlq.change_failurerecord"
        )

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("dlq.requeue_failurerecord")

    def has_requeue_other_model_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("dlq.requeue_other_model_failurerecord")

    def has_requeue_matching_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("dlq.requeue_matching_failurerecord")

    def has_resolve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("dlq.resolve_failurerecord")

    def has_ignore_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("dlq.ignore_failurerecord")

    # --- actions ---------------------------------------------------------------------------

    def _report(self, request: HttpRequest, done: int, total: int, verb: str) -> None:
        self.message_user(request, f"{verb} {done} of {total} selected.", messages.SUCCESS)
        if done < total:
            self.message_user(
                request,
                f"{total - done} record(s) were already handled and were left alone.",
                messages.WARNING,
            )

    @admin.action(description="Requeue selected jobs (fresh retry budget)", permissions=["requeue"])
    def requeue(self, request: HttpRequest, queryset: QuerySet[FailureRecord]) -> None:
        done = 0
        for record in queryset:
            try:
                done += failure_requeue(record=record, by=request.user)  # type: ignore[arg-type]
            except ApplicationError:
                pass
        self._report(request, done, len(queryset), "Requeued")

    @admin.action(
        description="Requeue selected jobs with another model…",
        permissions=["requeue_other_model"],
    )
    def requeue_with_model(
        self, request: HttpRequest, queryset: QuerySet[FailureRecord]
    ) -> HttpResponse | None:
        form = ModelChoiceForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            model = form.cleaned_data["model"]
            done = 0
            for record in queryset:
                try:
                    done += failure_requeue(
                        record=record,
                        by=request.user,  # type: ignore[arg-type]
                        model=model,
                    )
                except ApplicationError as exc:
                    self.message_user(request, f"{record}: {exc.message}", messages.ERROR)
            self._report(request, done, len(queryset), f"Requeued on {model}")
            return None
        estimate = failure_requeue_estimate(records=queryset)
        return self._intermediate(
            request,
            queryset,
            action="requeue_with_model",
            title="Requeue with another model",
            form=form,
            button="Requeue on this model",
            estimate=estimate,
        )

    @admin.action(description="Resolve selected…", permissions=["resolve"])
    def resolve(
        self, request: HttpRequest, queryset: QuerySet[FailureRecord]
    ) -> HttpResponse | None:
        return self._close(request, queryset, FailureRecord.State.RESOLVED, "Resolve")

    @admin.action(description="Ignore selected…", permissions=["ignore"])
    def ignore(
        self, request: HttpRequest, queryset: QuerySet[FailureRecord]
    ) -> HttpResponse | None:
        return self._close(request, queryset, FailureRecord.State.IGNORED, "Ignore")

    def _close(
        self, request: HttpRequest, queryset: QuerySet[FailureRecord], state: str, verb: str
    ) -> HttpResponse | None:
        form = CommentForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            done = 0
            for record in queryset:
                try:
                    done += failure_close(
                        record=record,
                        by=request.user,  # type: ignore[arg-type]
                        comment=form.cleaned_data["comment"],
                        state=state,
                    )
                except ApplicationError:
                    pass
            self._report(request, done, len(queryset), f"{verb}d")
            return None
        return self._intermediate(
            request,
            queryset,
            action=state == FailureRecord.State.RESOLVED and "resolve" or "ignore",
            title=f"{verb} failures",
            form=form,
            button=verb,
        )

    def _intermediate(
        self,
        request: HttpRequest,
        queryset: QuerySet[FailureRecord],
        *,
        action: str,
        title: str,
        form: forms.Form,
        button: str,
        estimate: Any = None,
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "records": queryset.select_related("job"),
            "form": form,
            "action": action,
            "button": button,
            "estimate": estimate,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "selected_ids": [str(pk) for pk in queryset.values_list("pk", flat=True)],
        }
        return TemplateResponse(request, "admin/dlq/failurerecord/action_form.html", context)

    # --- requeue all matching the current filter -------------------------------------------

    def get_urls(self):  # type: ignore[no-untyped-def]
        custom = [
            path(
                "requeue-matching/",
                self.admin_site.admin_view(self.requeue_matching_view),
                name="dlq_failurerecord_requeue_matching",
            )
        ]
        return custom + super().get_urls()

    def changelist_view(self, request, extra_context=None):  # type: ignore[no-untyped-def]
        extra_context = extra_context or {}
        can_requeue_matching = self.has_requeue_matching_permission(request)
        extra_context["can_requeue_matching"] = can_requeue_matching
        if can_requeue_matching:
            # Bulk requeues still going, each linked to its progress page.
            extra_context["active_bulk_requeues"] = list(
                BulkRequeue.objects.filter(
                    state__in=[BulkRequeue.State.PENDING, BulkRequeue.State.RUNNING]
                )
                .only("id", "description", "state", "total", "processed", "created_at")
                .order_by("-created_at")[:5]
            )
        return super().changelist_view(request, extra_context=extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):  # type: ignore[no-untyped-def]
        # The detail page offers the same actions as the list, for this one record.
        labels = {
            "requeue": "Requeue",
            "requeue_with_model": "Requeue on another model…",
            "resolve": "Resolve…",
            "ignore": "Ignore…",
        }
        allowed = self.get_actions(request)
        extra_context = {
            **(extra_context or {}),
            "record_actions": [(name, label) for name, label in labels.items() if name in allowed],
        }
        return super().change_view(request, object_id, form_url, extra_context)

    def requeue_matching_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_requeue_matching_permission(request):
            raise PermissionDenied
        # The changelist's own filtering (list filters, search, date hierarchy) picks the set,
        # so "matching" means exactly what the operator saw.
        filters = request.GET.copy()
        records = self.get_changelist_instance(request).get_queryset(request)
        back = reverse("admin:dlq_failurerecord_changelist") + (
            f"?{filters.urlencode()}" if filters else ""
        )
        if request.method == "POST" and request.POST.get("confirm") == "yes":
            # Only the ids are read here; a worker on the default queue does the requeuing.
            bulk = bulk_requeue_start(
                records=records,
                by=request.user,  # type: ignore[arg-type]
                description=(f"Filter: {filters.urlencode()}" if filters else "Every open failure"),
            )
            progress = reverse("admin:dlq_bulkrequeue_change", args=[bulk.id])
            self.message_user(
                request,
                format_html(
                    "Requeuing {} job(s) matching the filter in the background: "
                    '<a href="{}" class="bulk-requeue-link">follow its progress</a>.',
                    bulk.total,
                    progress,
                ),
                messages.SUCCESS,
            )
            return HttpResponseRedirect(progress)
        estimate = failure_requeue_estimate(records=records)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Requeue all matching failures",
            "estimate": estimate,
            "filters": filters.urlencode(),
            "filter_items": [(k, v) for k, v in filters.items()],
            "back_url": back,
            "sample": records.filter(state=FailureRecord.State.OPEN).select_related("job")[:20],
        }
        return TemplateResponse(
            request, "admin/dlq/failurerecord/requeue_matching_confirm.html", context
        )
