from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from api.errors import Conflict
from jobs.models import LlmJob
from llmops.admin import ReadOnlyAdmin
from pipelines.models import Pipeline, PipelineStep
from pipelines.services import pipeline_cancel


class PipelineStepInline(admin.TabularInline):
    """Each step with a link to its job, once it has one; read-only (steps change only through
    their jobs' transitions)."""

    model = PipelineStep
    extra = 0
    can_delete = False
    fields = [
        "index",
        "step_status",
        "job_link",
        "step_feature",
        "step_model",
        "step_attempts",
        "step_cost_usd",
    ]
    readonly_fields = [str(name) for name in fields]

    def get_queryset(self, request: HttpRequest) -> QuerySet[PipelineStep]:
        # One query for every step and its job; the jobs' large columns stay unread.
        return (
            super()
            .get_queryset(request)
            .select_related("job", "pipeline")
            .defer(*(f"job__{field}" for field in LlmJob.REQUEST_FIELDS), "job__output_text")
        )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="status")
    def step_status(self, step: PipelineStep) -> str:
        status = step.status_in(step.pipeline.status)
        if step.job is None and step.error_code:
            return f"{status}: refused at start ({step.error_code})"
        return status

    @admin.display(description="job")
    def job_link(self, step: PipelineStep) -> str:
        if step.job_id is None:
            return "-"
        url = reverse("admin:jobs_llmjob_change", args=[step.job_id])
        return format_html('<a href="{}">{}</a>', url, step.job_id)

    @admin.display(description="feature")
    def step_feature(self, step: PipelineStep) -> str:
        return step.job.feature if step.job else step.request.get("feature", "")

    @admin.display(description="model")
    def step_model(self, step: PipelineStep) -> str:
        return step.job.model if step.job else step.request.get("model", "")

    @admin.display(description="attempts")
    def step_attempts(self, step: PipelineStep) -> int:
        return step.job.attempts if step.job else 0

    @admin.display(description="cost (USD)")
    def step_cost_usd(self, step: PipelineStep) -> Any:
        return step.job.cost_usd if step.job else "-"


@admin.register(Pipeline)
class PipelineAdmin(ReadOnlyAdmin):
    """Pipelines are created through the API; staff follow them to their steps' jobs and may
    cancel them."""

    list_display = ["id", "name", "status", "step_count", "user", "created_at", "finished_at"]
    list_filter = ["status"]
    search_fields = ["=id", "name", "=user__username"]
    list_select_related = ["user"]
    date_hierarchy = "created_at"
    fields = ["id", "name", "user", "status", "step_count", "created_at", "finished_at"]
    readonly_fields = [str(name) for name in fields]
    inlines = [PipelineStepInline]
    actions = ["cancel_pipelines"]

    @admin.action(description="Cancel the selected pipelines", permissions=["cancel"])
    def cancel_pipelines(self, request: HttpRequest, queryset: QuerySet[Pipeline]) -> None:
        cancelled = skipped = 0
        for pipeline in queryset:
            try:
                pipeline_cancel(pipeline=pipeline)
                cancelled += 1
            except Conflict:
                skipped += 1
        self.message_user(
            request,
            f"Cancelled {cancelled} pipeline(s); {skipped} already completed or cancelled.",
            messages.SUCCESS if cancelled else messages.WARNING,
        )

    def has_cancel_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("pipelines.cancel_pipeline")
