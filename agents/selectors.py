from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import QuerySet

from agents.models import AgentRun, AgentStep
from api.errors import NotFound, ValidationFailed
from jobs.tags import validate_tag_filter

__all__ = ["agent_run_get_for_user", "agent_run_list_for_user", "agent_run_steps"]


def _sees_all(user: User, permission: str) -> bool:
    return user.is_staff and user.has_perm(permission)


def agent_run_get_for_user(
    *, user: User, run_id: UUID, permission: str = "agents.view_agentrun"
) -> AgentRun:
    """The user's own run, or any for staff holding ``permission`` (seeing it, approving with
    ``agents.approve_agentrun``, cancelling with ``agents.cancel_agentrun``); another user's is
    indistinguishable from a missing one."""
    runs = (
        AgentRun.objects.all()
        if _sees_all(user, permission)
        else AgentRun.objects.filter(user=user)
    )
    run = runs.filter(id=run_id).first()
    if run is None:
        raise NotFound("No such agent run.", code="agent_run_not_found")
    return run


def agent_run_steps(*, run: AgentRun) -> list[AgentStep]:
    """Its steps in order, in one query."""
    return list(AgentStep.objects.filter(run=run).order_by("index"))


def agent_run_list_for_user(
    *, user: User, status: str | None = None, tag: str | None = None
) -> QuerySet[AgentRun]:
    """The user's own runs, newest first; every run for staff with ``agents.view_agentrun``;
    with ``tag``, those carrying it."""
    runs = (
        AgentRun.objects.all()
        if _sees_all(user, "agents.view_agentrun")
        else AgentRun.objects.filter(user=user)
    )
    if status:
        if status not in AgentRun.Status.values:
            raise ValidationFailed(
                f"status must be one of {', '.join(AgentRun.Status.values)}.",
                code="invalid_filter",
                detail={"field": "status"},
            )
        runs = runs.filter(status=status)
    if tag := validate_tag_filter(tag):
        runs = runs.filter(tag_rows__tag=tag)
    return runs.defer("messages", "system", "output").order_by("-created_at", "-id")
