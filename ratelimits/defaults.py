"""The shared limiter's settings (its switch, configured limits, waits, windows, bursts,
slow start, fair shares), each from its environment variable; the settings take them as they
are (llmops/settings.py). In ratelimits/checks.py: whether each value is right."""

from llmops.env import env

__all__ = [
    "LLM_FEATURE_WEIGHTS",
    "LLM_PRIORITY_FEATURES",
    "LLM_RATE_LIMITS",
    "LLM_RATE_LIMIT_BOOTSTRAP_CONCURRENCY",
    "LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS",
    "LLM_RATE_LIMIT_BURST_SECONDS",
    "LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS",
    "LLM_RATE_LIMIT_ENABLED",
    "LLM_RATE_LIMIT_LEARNED_TTL_SECONDS",
    "LLM_RATE_LIMIT_MARGIN_SECONDS",
    "LLM_RATE_LIMIT_MAX_WAIT_SECONDS",
    "LLM_RATE_LIMIT_PACE_AHEAD_SECONDS",
    "LLM_RATE_LIMIT_SLOW_START",
    "LLM_RATE_LIMIT_WINDOW_SECONDS",
    "LLM_USER_FAIR_SHARE",
    "LLM_USER_MAX_SHARE",
]

LLM_RATE_LIMIT_ENABLED = env.switch("LLM_RATE_LIMIT_ENABLED", True)
LLM_RATE_LIMITS = env.json_value("LLM_RATE_LIMITS", {})
# Just under a second: a `retry-after: 1` pause has begun by then, so it is waited out here.
LLM_RATE_LIMIT_MAX_WAIT_SECONDS = env.number("LLM_RATE_LIMIT_MAX_WAIT_SECONDS", 0.99, minimum=0.0)
# A paced slot up to this far ahead is given to the call waiting only for it (it waits in
# process): held jobs come back once a second (rq's scheduler), and a slot given to none is lost.
LLM_RATE_LIMIT_PACE_AHEAD_SECONDS = env.number(
    "LLM_RATE_LIMIT_PACE_AHEAD_SECONDS", 3.0, minimum=0.0
)
LLM_RATE_LIMIT_WINDOW_SECONDS = env.number("LLM_RATE_LIMIT_WINDOW_SECONDS", 60.0, minimum=0.1)
# Send-to-arrival jitter: 0.25 s of a 60 s window costs 0.4 % of the limit.
LLM_RATE_LIMIT_MARGIN_SECONDS = env.number("LLM_RATE_LIMIT_MARGIN_SECONDS", 0.25, minimum=0.0)
LLM_RATE_LIMIT_BURST_SECONDS = env.number("LLM_RATE_LIMIT_BURST_SECONDS", 5.0, minimum=0.0)
LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS = env.number(
    "LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS", 600.0, minimum=0.001
)
LLM_RATE_LIMIT_SLOW_START = env.switch("LLM_RATE_LIMIT_SLOW_START", True)
LLM_RATE_LIMIT_BOOTSTRAP_CONCURRENCY = env.integer(
    "LLM_RATE_LIMIT_BOOTSTRAP_CONCURRENCY", 4, minimum=1
)
LLM_RATE_LIMIT_LEARNED_TTL_SECONDS = env.number(
    "LLM_RATE_LIMIT_LEARNED_TTL_SECONDS", 3600.0, minimum=60.0
)
LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS = env.number(
    "LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS", 5.0, minimum=0.0
)
LLM_FEATURE_WEIGHTS = env.json_value("LLM_FEATURE_WEIGHTS", {})
LLM_PRIORITY_FEATURES = frozenset(env.names("LLM_PRIORITY_FEATURES"))
LLM_USER_FAIR_SHARE = env.switch("LLM_USER_FAIR_SHARE", True)
LLM_USER_MAX_SHARE = env.number("LLM_USER_MAX_SHARE", 1.0)  # over 0, at most 1 (1: no cap)
