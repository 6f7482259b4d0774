"""The rate-limit gate of the job path, and staff's edits of the configured limits.

``jobs/runner.py`` calls, for each attempt: ``rate_limit_acquire`` before the budget reservation
and the claim (a job that gets no slot is held with ``job_hold``: no attempt used, no call made),
``rate_limit_release`` when the attempt does not start after all, ``rate_limit_sent`` as the
request leaves and ``rate_limit_settle`` with the call's outcome.
"""

import logging
import random
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from redis.exceptions import RedisError

from jobs.models import LlmJob
from ledger.pricing import estimate_input_tokens
from providers.base import ProviderOutcome
from providers.errors import failure_reason
from providers.ratelimit_headers import MAX_PAUSE_SECONDS, learned_from_headers, pause_after_429
from providers.selectors import provider_name_for_model
from ratelimits.configured_limits import config_cache_clear, configured_limits, limiter_line
from ratelimits.limiter import limiter_mark_sent, limiter_reserve, limiter_settle
from ratelimits.models import RateLimit
from runtime.db_connections import release_connection

__all__ = [
    "RateLimitGrant",
    "rate_limit_acquire",
    "rate_limit_delete",
    "rate_limit_release",
    "rate_limit_save",
    "rate_limit_sent",
    "rate_limit_settle",
]

logger = logging.getLogger(__name__)

REDIS_DOWN_HOLD_SECONDS = 2.0
"""A job whose slot cannot be asked for (Redis gone) is held this long: better late than a
burst no limiter counted."""


@dataclass(frozen=True)
class RateLimitGrant:
    """What the limiter said about one attempt: a reservation to settle, or a hold."""

    provider: str
    model: str
    reservation_id: str | None
    """None when nothing was reserved (the limiter is off, or the job is held)."""
    hold_seconds: float | None = None
    """Set when the job must go back on the queue for this long (``job_hold``)."""
    reason: str = ""
    waited_seconds: float = 0.0
    """How long the worker waited in process before the answer."""
    start_at: float = 0.0
    """``time.monotonic()`` at which its paced slot is due: ``rate_limit_sent`` waits for it, so
    the request leaves on its slot, the budget and the claim done meanwhile."""

    @property
    def held(self) -> bool:
        return self.hold_seconds is not None


def rate_limit_acquire(*, job: LlmJob, attempt: int) -> RateLimitGrant:
    """Reserve 1 request, the input-token upper bound and ``max_tokens`` for this attempt.

    Waits in process while the wait is short (``LLM_RATE_LIMIT_MAX_WAIT_SECONDS`` in all);
    a longer wait returns a hold instead, for ``job_hold``.
    """
    # Each provider has its own limiter: its windows, learned limits and 429 pauses.
    provider, model = provider_name_for_model(model=job.run_model), job.run_model
    if not settings.LLM_RATE_LIMIT_ENABLED:
        return RateLimitGrant(provider, model, None)
    reservation_id = f"{job.id}:{attempt}"
    input_bound = estimate_input_tokens(messages=job.request_messages, system=job.system)
    started = time.monotonic()
    deadline = started + settings.LLM_RATE_LIMIT_MAX_WAIT_SECONDS
    recheck = _config_recheck_seconds()
    configured, read_at = configured_limits(provider=provider, model=model), started
    line, weights = limiter_line(job.feature, job.priority)
    while True:
        if time.monotonic() - read_at >= recheck:
            # Read again during a wait: it must end soon after staff remove or raise the limit
            # that made it, not last as long as that limit said.
            configured, read_at = (
                configured_limits(provider=provider, model=model),
                time.monotonic(),
            )
        try:
            verdict = limiter_reserve(
                provider=provider,
                model=model,
                reservation_id=reservation_id,
                job_id=str(job.id),
                feature=line,
                user=str(job.user_id),
                input_tokens=input_bound,
                output_tokens=job.max_tokens,
                rpm=configured.rpm,
                input_tpm=configured.input_tpm,
                output_tpm=configured.output_tpm,
                weights=weights,
                max_wait_ms=int((deadline - time.monotonic()) * 1000),
            )
        except RedisError as exc:
            logger.warning("rate limiter unavailable (%s); job held", type(exc).__name__)
            return RateLimitGrant(
                provider, model, None, REDIS_DOWN_HOLD_SECONDS, "redis_unavailable"
            )
        waited = time.monotonic() - started
        if verdict.admitted:
            # A paced slot ms away is held for this call: rate_limit_sent waits for it.
            due = time.monotonic() + verdict.ms / 1000
            return RateLimitGrant(
                provider, model, reservation_id, waited_seconds=waited, start_at=due
            )
        if verdict.status == 0:
            # No database connection (and so no slot of a threaded worker's few) is held while
            # this thread sleeps: the threads recording answers and heartbeats need them.
            release_connection()
            # A little jitter: threads that wait for the same slot do not all ask at once. No
            # sleep outlasts the config cache's period: a removed limit ends the wait by then.
            sleep = verdict.ms / 1000
            if configured.any:
                sleep = min(sleep, recheck)
            time.sleep(sleep + random.uniform(0, 0.02))
            continue
        hold = verdict.ms / 1000 + random.uniform(0, 0.05)
        return RateLimitGrant(provider, model, None, hold, verdict.reason, waited)


def _config_recheck_seconds() -> float:
    """How often a call waiting in process reads the configured limits again: the config
    cache's period, and at least a second (a period of 0, as in tests, would otherwise send a
    query, and take a database slot, at every ask of every waiting thread)."""
    return max(1.0, settings.LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS)


def rate_limit_sent(grant: RateLimitGrant) -> None:
    """The request leaves now, or at its paced slot if that is still ahead (and after a pause
    every worker began since): its reservation counts from that moment. Waiting here, after
    the budget and the claim, not before them, makes the request leave on its slot: the
    database work between would otherwise shift it by a varying few tens of ms, and a provider
    that enforces short intervals counts arrivals."""
    if grant.reservation_id is None:
        return
    delay = grant.start_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    # A 429 meanwhile moves the slot behind its pause (settle.lua): wait for it, up to the
    # longest pause there is (then the call leaves: a job claimed must not wait forever).
    give_up = time.monotonic() + MAX_PAUSE_SECONDS
    try:
        while wait_ms := limiter_mark_sent(
            provider=grant.provider, model=grant.model, reservation_id=grant.reservation_id
        ):
            if time.monotonic() >= give_up:
                break
            time.sleep(wait_ms / 1000)
    except RedisError:
        logger.warning("rate limiter: the reservation's send time could not be recorded")


def rate_limit_release(grant: RateLimitGrant) -> None:
    """The attempt does not start after all (budget refused, claimed by no one): its
    reservation goes back."""
    if grant.reservation_id is None:
        return
    try:
        limiter_settle(
            provider=grant.provider,
            model=grant.model,
            reservation_id=grant.reservation_id,
            mode="drop",
        )
    except RedisError:
        logger.warning("rate limiter: a reservation could not be released; it lapses itself")


def rate_limit_settle(grant: RateLimitGrant, outcome: ProviderOutcome) -> None:
    """Book what the call really used, learn the provider's limits from its headers, and after
    a rate-limit 429 pause every worker until the provider's reset. Never raises."""
    if grant.reservation_id is None:
        return
    learned = learned_from_headers(outcome.rate_limit_headers)
    mode, input_tokens, output_tokens, pause, rate_limited = "settle", 0, 0, 0.0, False
    if outcome.kind == "success":
        usage = outcome.usage
        # Cache reads do not count against the input limit of current models; writes do.
        input_tokens = (
            usage.get("input_tokens", 0)
            + usage.get("cache_write_5m_tokens", 0)
            + usage.get("cache_write_1h_tokens", 0)
        )
        output_tokens = usage.get("output_tokens", 0)
    elif outcome.kind == "error_response":
        reason = failure_reason(
            kind=outcome.kind,
            http_status=outcome.http_status,
            error_type=outcome.error_type,
            error_code=outcome.error_code,
            message=outcome.message,
        )
        if reason == "rate_limited":
            rate_limited = True
            pause = pause_after_429(
                retry_after=outcome.retry_after, headers=outcome.rate_limit_headers
            )
            logger.warning(
                "rate limited by the provider (429): every worker pauses %.1fs on %s",
                pause,
                grant.model,
            )
    elif outcome.kind == "connection_error":
        mode = "drop"
    else:
        mode = "keep"  # read timeout, dropped connection: it may all have been used
    answered = outcome.kind == "success" or bool(learned)
    try:
        limiter_settle(
            provider=grant.provider,
            model=grant.model,
            reservation_id=grant.reservation_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            learned=learned if answered else None,
            pause_seconds=pause,
            mode=mode,
            rate_limited=rate_limited,
        )
    except RedisError:
        logger.warning("rate limiter: a call's usage could not be recorded; it lapses itself")


# --- Staff edits --------------------------------------------------------------------------------


@transaction.atomic
def rate_limit_save(*, rate_limit: RateLimit) -> RateLimit:
    """Create or change a configured limit. Every worker reads it within
    ``LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS``; this process at once."""
    rate_limit.full_clean()
    rate_limit.save()
    transaction.on_commit(config_cache_clear)
    return rate_limit


@transaction.atomic
def rate_limit_delete(*, rate_limit: RateLimit) -> None:
    rate_limit.delete()
    transaction.on_commit(config_cache_clear)
