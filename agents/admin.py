from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from agents.control import agent_run_cancel, agent_step_decide
from agents.models import AgentRun, AgentStep, DemoEmail
from api.errors import ApplicationError
from llmops.admin import ReadOnlyAdmin
from tracing.admin_cells import run_timeline_cell
from webhooks.admin import deliveries_cell
from webhooks.models import Subject


class AgentStepInline(admin.TabularInline):
    """The run's timeline: each turn's job (tokens, cost) and each tool call's input, output,
    error and duration; read-only (steps change only through the services)."""

    model = AgentStep
    extra = 0
    can_delete = False
    fields = [
        "index",
        "turn",
        "kind",
        "status",
        "job_link",
        "tokens",
        "name",
        "call_id",
        "input",
        "output",
        "is_error",
        "attempts",
        "duration",
    ]
    readonly_fields = [str(name) for name in fields]

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentStep]:
        return super().get_queryset(request).select_related("job")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="job")
    def job_link(self, step: AgentStep) -> str:
        if step.job_id is None:
            return "-"
        url = reverse("admin:jobs_llmjob_change", args=[step.job_id])
        return format_html('<a href="{}">{}</a>', url, step.job_id)

    @admin.display(description="tokens in / cache read / out, cost")
    def tokens(self, step: AgentStep) -> str:
        job = step.job
        if job is None:
            return "-"
        return (
            f"{job.input_tokens or 0} / {job.cache_read_input_tokens or 0} / "
            f"{job.output_tokens or 0}, ${job.cost_usd:.6f}"
        )

    @admin.display(description="duration")
    def duration(self, step: AgentStep) -> str:
        if step.started_at is None or step.finished_at is None:
            return "-"
        return f"{(step.finished_at - step.started_at).total_seconds():.2f} s"


def _decide(request: HttpRequest, queryset: QuerySet[AgentRun], *, approve: bool) -> None:
    done = 0
    for run in queryset:
        for step in AgentStep.objects.filter(run=run, status=AgentStep.Status.WAITING_APPROVAL):
            try:
                agent_step_decide(
                    run=run,
                    call_id=step.call_id,
                    approve=approve,
                    reason="" if approve else "Rejected in the admin.",
                    user=request.user,  # type: ignore[arg-type]
                )
                done += 1
            except ApplicationError as exc:
                messages.warning(request, f"{run.id}: {exc.message}")
    verb = "approved" if approve else "rejected"
    messages.success(request, f"{done} tool call(s) {verb}.")


@admin.register(AgentRun)
class AgentRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "status", "turns", "cost_usd", "feature", "model", "user", "created_at"]
    list_filter = ["status", "feature"]
    list_select_related = ["user"]
    search_fields = ["id", "feature"]
    inlines = [AgentStepInline]
    actions = ["approve_calls", "reject_calls", "cancel_runs"]
    exclude = ["idempotency_key_hash"]
    readonly_fields = ["timeline", "webhooks"]

    @admin.display(description="timeline")
    def timeline(self, run: AgentRun) -> str:
        """Its turns and tool calls from its rows: the spans of its trace (tracing/)."""
        return run_timeline_cell(run)

    @admin.display(description="webhooks")
    def webhooks(self, run: AgentRun) -> str:
        """Its final state POSTed to its callback_url, linked to the delivery log."""
        return deliveries_cell(subject_kind=Subject.AGENT_RUN, subject_id=run.id)

    @admin.action(description="Approve their waiting tool calls", permissions=["approve"])
    def approve_calls(self, request: HttpRequest, queryset: QuerySet[AgentRun]) -> None:
        _decide(request, queryset, approve=True)

    @admin.action(description="Reject their waiting tool calls", permissions=["approve"])
    def reject_calls(self, request: HttpRequest, queryset: QuerySet[AgentRun]) -> None:
        _decide(request, queryset, approve=False)

    @admin.action(description="Cancel", permissions=["cancel"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[AgentRun]) -> None:
        cancelled = 0
        for run in queryset:
            try:
                agent_run_cancel(run=run)
                cancelled += 1
            except ApplicationError as exc:
                messages.warning(request, f"{run.id}: {exc.message}")
        messages.success(request, f"{cancelled} run(s) cancelled.")

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("agents.approve_agentrun")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("agents.cancel_agentrun")


@admin.register(DemoEmail)
class DemoEmailAdmin(ReadOnlyAdmin):
    list_display = ["id", "to", "subject", "call_id", "created_at"]
