"""The job path's settings (request sizes, sockets, batches, retries, heartbeats, the
reconciler, the breaker, fallbacks, deadlines), each from its environment variable; the
settings take them as they are (llmops/settings.py). Each one's meaning:
docs/operations.md#settings."""

from llmops.env import env

__all__ = [
    "LLM_BATCH_MAX_ITEMS",
    "LLM_BATCH_MAX_REQUEST_BYTES",
    "LLM_BATCH_PROGRESS_INTERVAL",
    "LLM_BREAKER_ENABLED",
    "LLM_BREAKER_PROBE_SECONDS",
    "LLM_CONCURRENCY_KEY_WAIT_SECONDS",
    "LLM_CONCURRENCY_PER_KEY",
    "LLM_DEADLINE_ALERT_RATIO",
    "LLM_DEADLINE_FRONT_SECONDS",
    "LLM_EMBEDDING_GROUP_SIZE",
    "LLM_FALLBACK_AFTER_ATTEMPTS",
    "LLM_FALLBACK_AFTER_WAIT_SECONDS",
    "LLM_HEARTBEAT_SECONDS",
    "LLM_LOST_QUEUE_GRACE_SECONDS",
    "LLM_PRIORITY_MAX_WAIT_SECONDS",
    "LLM_PRIORITY_WEIGHT_FACTOR",
    "LLM_MAX_ATTEMPTS",
    "LLM_MAX_REQUEST_BYTES",
    "LLM_OVERDUE_RETRY_ALERT_SECONDS",
    "LLM_OVERDUE_RETRY_SECONDS",
    "LLM_RECONCILE_INTERVAL",
    "LLM_LEASE_SECONDS",
    "LLM_RECORD_RETRY_SECONDS",
    "LLM_WORKER_DB_TIMEOUT_SECONDS",
    "LLM_RETRY_DELAY_SCALE",
    "LLM_RETRY_JITTER",
    "LLM_RETRY_SCHEDULES",
    "LLM_STALE_AFTER_SECONDS",
    "PIPELINE_MAX_STEPS",
    "WS_MAX_CONNECTIONS_PER_USER",
    "WS_MAX_MESSAGE_BYTES",
    "WS_MAX_QUEUED_BYTES",
    "WS_REAUTH_SECONDS",
]

LLM_MAX_REQUEST_BYTES = env.integer("LLM_MAX_REQUEST_BYTES", 1024 * 1024, minimum=1024)
WS_MAX_MESSAGE_BYTES = env.integer("WS_MAX_MESSAGE_BYTES", 16 * 1024, minimum=1024)
WS_REAUTH_SECONDS = env.number("WS_REAUTH_SECONDS", 5.0, minimum=0.1)
WS_MAX_QUEUED_BYTES = env.integer("WS_MAX_QUEUED_BYTES", 1024 * 1024, minimum=128 * 1024)
WS_MAX_CONNECTIONS_PER_USER = env.integer("WS_MAX_CONNECTIONS_PER_USER", 20, minimum=1)
LLM_BATCH_MAX_ITEMS = env.integer("LLM_BATCH_MAX_ITEMS", 10_000, minimum=1)
LLM_EMBEDDING_GROUP_SIZE = env.integer("LLM_EMBEDDING_GROUP_SIZE", 128, minimum=1)  # <= 2048 used
# 10,000 items of about 1.6 KB; the web process holds the parsed body (several times its size).
LLM_BATCH_MAX_REQUEST_BYTES = env.integer(
    "LLM_BATCH_MAX_REQUEST_BYTES", 16 * 1024 * 1024, minimum=1024
)
LLM_BATCH_PROGRESS_INTERVAL = env.number("LLM_BATCH_PROGRESS_INTERVAL", 1.0, minimum=0.0)
LLM_MAX_ATTEMPTS = env.integer("LLM_MAX_ATTEMPTS", 10, minimum=1)
# Each step a provider call of seconds to minutes: 20 in a row is already a long chain.
PIPELINE_MAX_STEPS = env.integer("PIPELINE_MAX_STEPS", 20, minimum=1)
LLM_RETRY_SCHEDULES: dict[str, list[float]] = env.json_value("LLM_RETRY_SCHEDULES", {})
LLM_RETRY_JITTER = env.number("LLM_RETRY_JITTER", 0.30, minimum=0.0)
LLM_CONCURRENCY_PER_KEY = env.integer("LLM_CONCURRENCY_PER_KEY", 1, minimum=1)
LLM_CONCURRENCY_KEY_WAIT_SECONDS = env.number("LLM_CONCURRENCY_KEY_WAIT_SECONDS", 2.0, minimum=0.1)
LLM_RETRY_DELAY_SCALE = env.number("LLM_RETRY_DELAY_SCALE", 1.0, minimum=0.0)
LLM_HEARTBEAT_SECONDS = env.number("LLM_HEARTBEAT_SECONDS", 10.0, minimum=0.1)
LLM_STALE_AFTER_SECONDS = env.number("LLM_STALE_AFTER_SECONDS", 45.0, minimum=1.0)
LLM_LOST_QUEUE_GRACE_SECONDS = env.number("LLM_LOST_QUEUE_GRACE_SECONDS", 30.0, minimum=0.0)
# Priorities (jobs/priorities.py): a low job waits at most this long behind newer work before
# the reconciler moves it to the front; a high job's limiter line weighs this many times its
# feature's weight (a low one's that many times less).
LLM_PRIORITY_MAX_WAIT_SECONDS = env.number("LLM_PRIORITY_MAX_WAIT_SECONDS", 600.0, minimum=0.0)
LLM_PRIORITY_WEIGHT_FACTOR = env.number("LLM_PRIORITY_WEIGHT_FACTOR", 10.0, minimum=1.0)
# A killed worker's job runs again within two minutes: the arithmetic in jobs/reconciler.py.
LLM_RECONCILE_INTERVAL = env.number("LLM_RECONCILE_INTERVAL", 10.0, minimum=0.1)
# rq's scheduler polls every second: 15 s is many of its passes, not one late poll.
LLM_OVERDUE_RETRY_SECONDS = env.number("LLM_OVERDUE_RETRY_SECONDS", 15.0, minimum=0.0)
# A paid answer waiting for a frozen database path is recorded when it heals: its claim is held
# meanwhile while the host renews it on either path (never past the RQ timeout's margin).
LLM_RECORD_RETRY_SECONDS = env.number("LLM_RECORD_RETRY_SECONDS", 300.0, minimum=0.0)
# Self-fencing (jobs/heartbeat.py): an attempt whose claim was renewed on neither path this long
# stops its call. 0: the lock's ttl less two beats (20 s); always below the ttl and the stale
# threshold (jobs/checks.py).
LLM_LEASE_SECONDS = env.number("LLM_LEASE_SECONDS", 0.0, minimum=0.0)
# Every read and write of a worker's or a loop's database connections waits at most this long
# (runtime/db_connections.py): a frozen path fails a beat or a recording instead of hanging it.
LLM_WORKER_DB_TIMEOUT_SECONDS = env.integer("LLM_WORKER_DB_TIMEOUT_SECONDS", 20, minimum=1)
LLM_BREAKER_ENABLED = env.switch("LLM_BREAKER_ENABLED", True)
# One call every 30 s is no load, and dispatch resumes within about a minute of a fix.
LLM_BREAKER_PROBE_SECONDS = env.number("LLM_BREAKER_PROBE_SECONDS", 30.0, minimum=1.0)
LLM_OVERDUE_RETRY_ALERT_SECONDS = env.number("LLM_OVERDUE_RETRY_ALERT_SECONDS", 120.0, minimum=0.0)
# Fallbacks (features/, jobs/fallbacks.py): two transient failures in a row on one model say it
# is in trouble (a 529 storm lasts minutes), not a blip its own retry schedule rides out.
LLM_FALLBACK_AFTER_ATTEMPTS = env.integer("LLM_FALLBACK_AFTER_ATTEMPTS", 2, minimum=1)
# A limiter wait this long (a full minute's window is 60 s) is better spent on the next model.
LLM_FALLBACK_AFTER_WAIT_SECONDS = env.number("LLM_FALLBACK_AFTER_WAIT_SECONDS", 30.0, minimum=0.0)
# Deadlines (jobs/deadlines.py): a WARNING when a feature meets fewer than 95 % in an hour; a
# job whose deadline is within 60 s of its enqueue goes to the front of the llm queue.
LLM_DEADLINE_ALERT_RATIO = env.number("LLM_DEADLINE_ALERT_RATIO", 0.95, minimum=0.0)
LLM_DEADLINE_FRONT_SECONDS = env.number("LLM_DEADLINE_FRONT_SECONDS", 60.0, minimum=0.0)
