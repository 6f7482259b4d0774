"""Deferred work's settings (gathering, batch size, polling, the real-time margin), each from
its environment variable; the settings take them as they are (llmops/settings.py)."""

from llmops.env import env

__all__ = [
    "LLM_DEFERRED_FALLBACK_MARGIN_SECONDS",
    "LLM_DEFERRED_FLUSH_SECONDS",
    "LLM_DEFERRED_MAX_BATCH",
    "LLM_DEFERRED_POLL_SECONDS",
    "LLM_DEFERRED_READ_TIMEOUT_SECONDS",
]

# Deferred jobs (deferred/): gathered per model into provider message batches at the batch price.
LLM_DEFERRED_FLUSH_SECONDS = env.number("LLM_DEFERRED_FLUSH_SECONDS", 60.0, minimum=0.0)
LLM_DEFERRED_MAX_BATCH = env.integer("LLM_DEFERRED_MAX_BATCH", 10_000, minimum=1)
# A batch is read this often: results are there only once it ends (minutes to hours).
LLM_DEFERRED_POLL_SECONDS = env.number("LLM_DEFERRED_POLL_SECONDS", 10.0, minimum=0.1)
# Beyond a real-time run's own bound (its RQ timeout): 10 minutes of slack before a deadline.
LLM_DEFERRED_FALLBACK_MARGIN_SECONDS = env.number(
    "LLM_DEFERRED_FALLBACK_MARGIN_SECONDS", 600.0, minimum=0.0
)
# The Message Batches calls answer at once (a create is accepted before any work starts) and
# results stream line by line: a socket silent this long has stalled. It also bounds how long a
# batch claimed by a loop that died stays unsent before its jobs are recovered (deferred/report.py).
LLM_DEFERRED_READ_TIMEOUT_SECONDS = env.number(
    "LLM_DEFERRED_READ_TIMEOUT_SECONDS", 60.0, minimum=0.1
)
