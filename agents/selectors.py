from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import QuerySet

from agents.models import AgentRun, AgentStep
from api.errors import NotFound
from api.runs import RunFilters, filter_runs

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


def agent_run_list_for_user(*, user: User, filters: RunFilters | None = None) -> QuerySet[AgentRun]:
    """The user's own runs, newest first, by the shared list filters (api/runs.py); every run
    for staff with ``agents.view_agentrun``."""
    runs = (
        AgentRun.objects.all()
        if _sees_all(user, "agents.view_agentrun")
        else AgentRun.objects.filter(user=user)
    )
    runs = runs.defer("messages", "system", "output")
    return filter_runs(runs, filters or RunFilters(), statuses=AgentRun.Status.values)
