"""The ops dashboard's constants: its windows, its refresh, how much each panel reads."""

__all__ = [
    "COST_DAYS",
    "DEFAULT_WINDOW_HOURS",
    "MAX_BUDGETS",
    "MAX_KEYS",
    "PERCENTS",
    "RECENT_FAILURES",
    "REFRESH_SECONDS",
    "RQ_TIMING_SAMPLE",
    "WINDOW_HOURS",
]

WINDOW_HOURS = (1, 6, 24)
"""The time ranges the charts offer; per-minute buckets, so 24 h is 1,440 points."""
DEFAULT_WINDOW_HOURS = 6
REFRESH_SECONDS = 10
"""How often the page asks for fresh numbers: near-live without loading the database."""
COST_DAYS = 14
"""Cost per feature per day covers today (UTC) and the 13 days before it."""
RECENT_FAILURES = 10
MAX_BUDGETS = 50
MAX_KEYS = 20
"""Keys the spend-by-key panel lists: the most spent first."""
"""Budgets are tens; each costs a few queries (usage and forecast), so the panel stops at this."""
RQ_TIMING_SAMPLE = 200
"""Finished rq jobs read per queue for the default and alerts timings (rq keeps a finished job
for its result_ttl, 500 s by default, so this is the last few minutes, not the window)."""
PERCENTS = (50, 95)
