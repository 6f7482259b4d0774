"""MCP servers' settings, each from its environment variable (llmops/settings.py takes them)."""

from llmops.env import env

__all__ = ["LLM_MCP_ALERT_AFTER_FAILURES"]

# Calls in a row that do not reach an MCP server (down, slow, 401) before a WARNING alert.
LLM_MCP_ALERT_AFTER_FAILURES = env.integer("LLM_MCP_ALERT_AFTER_FAILURES", 3, minimum=1)
