"""The alert an agent run raises when a tool call waits for a person's approval."""

from django.conf import settings

from agents.models import AgentRun, AgentStep

__all__ = ["approval_alert"]


def approval_alert(run: AgentRun, steps: list[AgentStep]) -> None:
    """A WARNING alert: the run waits for a person to approve or reject these calls."""
    # Imported here: alerts imports the jobs app, which must not import alerts at start.
    from alerts.destinations import destinations_for
    from alerts.notifications import alert_create

    names = ", ".join(f"{s.name} ({s.call_id})" for s in steps)
    alert_create(
        fingerprint=f"agent_approval:{run.id}:{steps[0].call_id}"[:255],
        severity="WARNING",
        action="trigger",
        source="agent_approval",
        title=f"Agent run {run.id} waits for approval: {names}",
        body=(
            f"Agent run {run.id} (feature {run.feature}) asks to call {names}. Approve or reject "
            f"it in the admin or with POST /api/v1/agent-runs/{run.id}/approvals/<call_id>/; it "
            f"fails with approval_timeout after {settings.LLM_AGENT_APPROVAL_TIMEOUT_SECONDS:g} s."
        ),
        details={
            "agent_run_id": str(run.id),
            "calls": [{"name": s.name, "call_id": s.call_id, "input": s.input} for s in steps],
        },
        destinations=destinations_for(severity="WARNING"),
    )
