"""Queue names, task paths and Redis key builders: the one module that spells them.

Modelled on rq's own ``defaults.py``. Plain constants and string builders with no Django import,
so that ``llmops/settings.py`` can read them too. Nothing else in the project spells a queue name,
a task path or a key prefix.
"""

import hashlib

__all__ = [
    "AGENTS_QUEUE",
    "AGENT_TOOLS_TASK",
    "ALERTS_QUEUE",
    "ALERT_FOR_FAILURE_TASK",
    "BATCH_CANCEL_TASK",
    "DELIVER_CALLBACK_TASK",
    "DELIVER_WEBHOOK_TASK",
    "DEFAULT_QUEUE",
    "DELIVER_ALERT_TASK",
    "FINGERPRINT_CHECK_TASK",
    "KEY_PREFIX",
    "LLM_QUEUE",
    "QUEUE_NAMES",
    "REQUEUE_MATCHING_TASK",
    "RUN_LLM_JOB_TASK",
    "agent_tools_job_id",
    "alert_for_failure_job_id",
    "batch_cancel_job_id",
    "bulk_requeue_job_id",
    "concurrency_key_slots_key",
    "job_lock_key",
    "loop_pass_key",
    "rate_limit_key",
    "rate_limit_key_pattern",
    "rate_limit_scope_of",
    "throttle_key",
]

LLM_QUEUE = "llm"
"""LLM calls: long network waits, their own workers and scheduler."""
ALERTS_QUEUE = "alerts"
"""Alert raising and delivery (one RQ job per destination), with their retries."""
DEFAULT_QUEUE = "default"
"""Everything else: staff bulk actions and housekeeping."""
AGENTS_QUEUE = "agents"
"""Agent runs' tool calls: Python functions that may wait seconds on a network or a database,
many at once on the threads of their own workers (never behind a bulk action)."""
QUEUE_NAMES = (LLM_QUEUE, DEFAULT_QUEUE, ALERTS_QUEUE, AGENTS_QUEUE)

RUN_LLM_JOB_TASK = "jobs.tasks.run_llm_job"
ALERT_FOR_FAILURE_TASK = "alerts.tasks.alert_for_failure"
DELIVER_ALERT_TASK = "alerts.tasks.deliver_alert"
FINGERPRINT_CHECK_TASK = "alerts.tasks.failure_fingerprint_check"
REQUEUE_MATCHING_TASK = "dlq.tasks.requeue_matching"
BATCH_CANCEL_TASK = "batches.tasks.cancel_batch_jobs"
DELIVER_WEBHOOK_TASK = "webhooks.tasks.deliver_webhook"
"""One attempt of a webhook delivery (alerts queue)."""
DELIVER_CALLBACK_TASK = "batches.tasks.deliver_callback"
"""A batch callback's attempt as queued before webhooks/ took them over: kept so that the RQ jobs
waiting at the upgrade still run (their rows kept their ids)."""
AGENT_TOOLS_TASK = "agents.tasks.run_agent_tools"
"""The tool calls of an agent run's current turn (agents queue)."""

KEY_PREFIX = "llmops:"
"""Every Redis key of ours starts with this (rq's own keys start with ``rq:``)."""


def job_lock_key(job_id: object) -> str:
    """The per-job lock a worker holds while it runs one attempt of the job."""
    return f"{KEY_PREFIX}job-lock:{job_id}"


def job_partial_text_key(job_id: object) -> str:
    """The text a running job has streamed so far (its current attempt's), for clients that
    resume from an offset (jobs/live_output.py)."""
    return f"{KEY_PREFIX}job-partial:{job_id}"


def job_partial_attempt_key(job_id: object) -> str:
    """The attempt whose text ``job_partial_text_key`` holds."""
    return f"{KEY_PREFIX}job-partial-attempt:{job_id}"


def job_cancel_key(job_id: object) -> str:
    """Set when a running job is to be cancelled; its worker watches it (jobs/cancellation.py)."""
    return f"{KEY_PREFIX}job-cancel:{job_id}"


def concurrency_key_slots_key(concurrency_key: str) -> str:
    """The running slots of one job ``concurrency_key`` (a sorted set of job ids by lease end).
    Hashed: the key is the caller's text, of any length and alphabet."""
    digest = hashlib.sha256(concurrency_key.encode()).hexdigest()
    return f"{KEY_PREFIX}concurrency:{digest}"


def config_token_key() -> str:
    """The token that names the current price table and budgets (ledger/config_cache.py)."""
    return f"{KEY_PREFIX}ledger-config"


def rate_limit_key(provider: str, model: str, part: str) -> str:
    """One part (window, usage, learned, pause...) of the shared rate limiter of a provider and
    model (ratelimits/limiter.py). The braces are a Redis Cluster hash tag: every key of one
    limiter lands in one slot, as its Lua scripts need."""
    return f"{KEY_PREFIX}ratelimit:{{{provider}/{model}}}:{part}"


def rate_limit_key_pattern(part: str) -> str:
    """A SCAN pattern matching that part of every provider's and model's limiter."""
    return f"{KEY_PREFIX}ratelimit:{{*}}:{part}"


def rate_limit_scope_of(key: str) -> tuple[str, str] | None:
    """(provider, model) of a key made by ``rate_limit_key``; None for any other key."""
    head = f"{KEY_PREFIX}ratelimit:{{"
    if not key.startswith(head) or "}:" not in key:
        return None
    provider, _, model = key[len(head) : key.rindex("}:")].partition("/")
    return (provider, model) if provider and model else None


def throttle_key(scope: str, user_id: object) -> str:
    """One user's request count in one throttle scope (api/submit_throttles.py)."""
    return f"{KEY_PREFIX}throttle:{scope}:{user_id}"


def loop_pass_key(name: str) -> str:
    """Where a long-running loop command notes its last finished pass (a cheap liveness mark)."""
    return f"{KEY_PREFIX}loop-pass:{name}"


def alert_for_failure_job_id(failure_id: int) -> str:
    """A fixed RQ job id per FailureRecord lets the sweep tell a waiting job from a lost one."""
    return f"alert-for-failure-{failure_id}"


def bulk_requeue_job_id(bulk_id: int) -> str:
    """A fixed RQ job id per BulkRequeue lets the sweep tell a waiting or running job from a
    lost one."""
    return f"bulk-requeue-{bulk_id}"


def batch_cancel_job_id(batch_id: object) -> str:
    """A fixed RQ job id per batch for cancelling its waiting jobs in the background: the sweep
    tells a waiting or running one from a lost one, and a second request adds no copy."""
    return f"batch-cancel-{batch_id}"


def agent_tools_job_id(run_id: object, token: str) -> str:
    """The RQ job id of one enqueue of an agent run's tool task; the run keeps it, so that the
    sweep tells a waiting or running task from a lost one (agents/sweep.py)."""
    return f"agent-tools-{run_id}-{token}"


def job_events_group(user_id: object) -> str:
    """The channel-layer group of one user's job events (WebSocket ``/ws/jobs/``)."""
    return f"job-events.user.{user_id}"


def job_group(job_id: object) -> str:
    """The channel-layer group of one job's events (``/ws/jobs/?job=<id>``)."""
    return f"job-events.job.{job_id}"


def all_jobs_group() -> str:
    """The channel-layer group of every job's events (``/ws/jobs/?all=1``, staff only)."""
    return "job-events.all"
