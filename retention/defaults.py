"""Retention's setting, from its environment variable (llmops/settings.py takes it as it is)."""

from llmops.env import env

__all__ = ["LLM_RETENTION_DAYS"]

# The monitor prunes, once a day, the content of jobs and runs that ended more than this many
# days ago (retention/services.py); 0 keeps everything (the default).
LLM_RETENTION_DAYS = env.integer("LLM_RETENTION_DAYS", 0, minimum=0)
