"""Agent runs' settings (tool modules, approval timeout, tool concurrency), each from its
environment variable; the settings take them as they are (llmops/settings.py)."""

from llmops.env import env

__all__ = [
    "LLM_AGENT_APPROVAL_TIMEOUT_SECONDS",
    "LLM_AGENT_TOOL_CONCURRENCY",
    "LLM_AGENT_TOOL_FORK_SERVER",
    "LLM_AGENT_TOOL_MODULES",
    "LLM_AGENT_WORKER_CONCURRENCY",
]

# Agent tools: dotted modules imported at start beside every installed app's agent_tools.py.
LLM_AGENT_TOOL_MODULES = env.names("LLM_AGENT_TOOL_MODULES", "agents.demo_tools")
# A run waiting for a human longer than this (a day) fails with approval_timeout.
LLM_AGENT_APPROVAL_TIMEOUT_SECONDS = env.number(
    "LLM_AGENT_APPROVAL_TIMEOUT_SECONDS", 86400.0, minimum=1.0
)
# Tool calls of one turn run at once, up to this many (threads of the default worker).
LLM_AGENT_TOOL_CONCURRENCY = env.integer("LLM_AGENT_TOOL_CONCURRENCY", 4, minimum=1)
# Tool tasks (one per turn) one `rqworker agents` process runs at once, each on a thread.
LLM_AGENT_WORKER_CONCURRENCY = env.integer("LLM_AGENT_WORKER_CONCURRENCY", 16, minimum=1)
# The agents worker forks its tool calls from a fork server made at its start
# (agents/fork_server.py); off: from the worker itself.
LLM_AGENT_TOOL_FORK_SERVER = env.switch("LLM_AGENT_TOOL_FORK_SERVER", True)
