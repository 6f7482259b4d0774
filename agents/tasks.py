"""RQ entry points of the agents app: load by id, call a service. No rule lives here."""

from uuid import UUID

from agents.runner import agent_tools_run


def run_agent_tools(run_id: str) -> str:
    """The tool calls of an agent run's current turn (agents queue)."""
    return agent_tools_run(run_id=UUID(run_id))
