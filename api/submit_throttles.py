"""Per-user throttling of submits: ``SubmitThrottle``, shared by every web process and host.

    class JobListCreateApi(APIView):
        throttle_classes = [SubmitThrottle]

A user may make ``LLM_SUBMIT_THROTTLE_RATE`` submits (``600/min`` by default; ``off`` turns it
off) across all submit endpoints together: they share the scope ``submit``, so a client cannot
double its rate by spreading over jobs, batches and pipelines. Only writes count: ``GET`` on the
same view (the job list) is never throttled. Over the rate, DRF answers ``429`` with the code
``throttled`` and ``Retry-After`` in whole seconds (api/errors.py).

The count lives in Redis, in one hash per user and scope (``llmops.queues.throttle_key``), kept by
one Lua script on Redis's clock: the web line runs several uvicorn processes (llmops/web.py),
maybe on several hosts, and DRF's own throttles keep a per-process cache (``LocMemCache``) and
read-modify-write it, so each process would grant the whole rate. The script counts a sliding
window the way Cloudflare does (the previous fixed window's count weighted by how much of it the
sliding window still covers, plus the current one's): one small hash per user whatever the rate,
where a log of timestamps would hold up to ``rate`` entries per user.

An API key with an ``rpm`` (keys/, docs/api.md#api-keys) is held to that many submissions per
minute across the same endpoints, on top of its user's rate and counted the same way; over it,
``429 throttled`` with ``Retry-After`` and ``detail.rpm``, the message naming the key's limit.

Redis unreachable: the throttle lets the request through and logs a warning (fail open). A
submit must keep answering ``202`` while Redis is down (the row is the truth and the reconciler
enqueues it later, docs/architecture.md#outages); refusing every submit during an outage, or
making each one wait for Redis, would turn a transport outage into an API outage, whereas a
few minutes without throttling only lets a client submit faster than its rate, which budgets
and the provider rate limiter still bound.
"""

import logging
import math

from django.conf import settings
from redis.commands.core import Script
from redis.exceptions import RedisError
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from api.errors import LimitExceeded
from api.throttle_rates import parse_rate
from keys.models import ApiKey
from keys.permissions import request_api_key
from keys.selectors import api_key_ancestor_ids
from llmops.queues import LLM_QUEUE, throttle_key
from runtime.redis_clients import queue_connection

__all__ = ["SubmitThrottle", "UserRateThrottle"]

logger = logging.getLogger(__name__)

# KEYS[1]: the user's hash (start of the current fixed window, its count, the previous one's).
# ARGV[1]: requests allowed per window, ARGV[2]: the window in ms.
# Returns {1, 0} (counted and allowed) or {0, ms until one more request would be allowed}.
_SLIDING_WINDOW = Script(
    None,  # type: ignore[arg-type]
    b"""
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local start = now - (now % window)
local state = redis.call('HMGET', KEYS[1], 'start', 'current', 'previous')
local stored = tonumber(state[1])
local current = tonumber(state[2]) or 0
local previous = tonumber(state[3]) or 0
if stored ~= start then
  if stored == start - window then previous = current else previous = 0 end
  current = 0
end
local left = window - (now - start)
if previous * left / window + current + 1 <= limit then
  redis.call('HSET', KEYS[1], 'start', start, 'current', current + 1, 'previous', previous)
  redis.call('PEXPIRE', KEYS[1], 2 * window)
  return {1, 0}
end
if current + 1 > limit then
  -- Not before the next window, where this one's count weighs (1 - elapsed / window).
  return {0, left + math.ceil(window * (1 - (limit - 1) / current))}
end
return {0, left - math.floor(window * (limit - 1 - current) / previous)}
""",
)


def _counted(scope: str, ident: object, requests: int, seconds: int) -> int | None:
    """Count one request of ``ident`` in ``scope``: None if allowed (or Redis is unreachable:
    fail open, logged), else the whole seconds until one more would be."""
    try:
        allowed, wait_ms = _SLIDING_WINDOW(
            keys=[throttle_key(scope, ident)],
            args=[requests, seconds * 1000],
            client=queue_connection(LLM_QUEUE),
        )
    except RedisError as exc:
        logger.warning(
            "throttle %s not checked, request let through: Redis %s: %s",
            scope,
            type(exc).__name__,
            exc,
        )
        return None
    if allowed:
        return None
    return max(1, math.ceil(int(wait_ms) / 1000))


class UserRateThrottle(BaseThrottle):
    """Writes per authenticated user, at the rate the setting ``rate_setting`` names, counted
    in Redis for every process (see the module's docstring). Subclasses set ``scope`` and
    ``rate_setting``."""

    scope = ""
    rate_setting = ""

    def __init__(self) -> None:
        self.retry_after: int | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        # Read at each request (not at import, as DRF's THROTTLE_RATES is): tests and a
        # settings change apply at once.
        rate = parse_rate(getattr(settings, self.rate_setting))
        user = request.user
        if rate is None or request.method in SAFE_METHODS or not user or not user.is_authenticated:
            return True
        requests, seconds = rate
        self.retry_after = _counted(self.scope, user.pk, requests, seconds)
        return self.retry_after is None

    def wait(self) -> float | None:
        return self.retry_after


class SubmitThrottle(UserRateThrottle):
    """Every endpoint that creates work (jobs, batches, pipelines, agent runs): one rate per
    user across all of them, ``LLM_SUBMIT_THROTTLE_RATE``, and the API key's own ``rpm``."""

    scope = "submit"
    rate_setting = "LLM_SUBMIT_THROTTLE_RATE"

    def allow_request(self, request: Request, view: APIView) -> bool:
        key = request_api_key(request)
        if key is not None and request.method not in SAFE_METHODS:
            # A key minted by a key submits within the rate of the key that minted it too.
            chain = [key]
            if key.parent_id is not None:
                chain += ApiKey.objects.filter(id__in=api_key_ancestor_ids(key.id))
            for limited in chain:
                if limited.rpm:
                    self._count_key(key, limited)
        return super().allow_request(request, view)

    @staticmethod
    def _count_key(key: ApiKey, limited: ApiKey) -> None:
        assert limited.rpm is not None
        wait = _counted(KEY_SUBMIT_SCOPE, limited.id, limited.rpm, 60)
        if wait is None:
            return
        whose = "This API key" if limited.id == key.id else "The API key that minted this one"
        raise LimitExceeded(
            f"{whose} ({limited.name}, {limited.prefix}...) may submit {limited.rpm} times a "
            f"minute; try again in {wait} s.",
            code="throttled",
            detail={"api_key": limited.id, "rpm": limited.rpm, "retry_after_seconds": wait},
            headers={"Retry-After": str(wait)},
        )


KEY_SUBMIT_SCOPE = "key-submit"
"""The throttle scope of a key's ``rpm``: counted per key id, whichever endpoint."""
