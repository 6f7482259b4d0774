"""At most ``LLM_CONCURRENCY_PER_KEY`` jobs with the same ``concurrency_key`` run at once.

Laravel's ``WithoutOverlapping`` for one document or one customer, shared by every worker on
every host: the running jobs of a key are the members of one Redis sorted set
(``llmops.queues.concurrency_key_slots_key``), each scored with the end of its lease. A worker
takes a slot before the claim, the job's heartbeat extends the lease, and the slot is given
back when the attempt ends. A worker killed with ``-9`` gives nothing back: its lease ends
after ``LLM_HEARTBEAT_SECONDS`` x 4, as the job's own lock does, and the slot frees itself. Time
is Redis's own clock, so hosts with skewed clocks agree. A job that finds its key busy goes back
on the queue (``jobs.services.job_hold``) without using an attempt.
"""

import math

from django.conf import settings
from redis import Redis

from llmops.queues import LLM_QUEUE, concurrency_key_slots_key
from runtime.redis_clients import queue_connection

__all__ = ["slot_acquire", "slot_extend", "slot_release"]

# KEYS[1] the key's slots; ARGV: job id, lease (ms), slots allowed.
# Drops ended leases, then takes (or renews) a slot if one is free. Returns 1 or 0.
_ACQUIRE = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local lease = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now_ms + lease, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], lease * 2)
  return 1
end
return 0
"""

# Renews a slot this job still holds (never takes one back after its lease ended and another
# job took it). Returns 1 or 0.
_EXTEND = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local lease = tonumber(ARGV[2])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) < now_ms then
  return 0
end
redis.call('ZADD', KEYS[1], now_ms + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease * 2)
return 1
"""


def _lease_ms() -> int:
    # The same life as the job's lock: a missed heartbeat or two, never a dead worker's minutes.
    return max(2000, math.ceil(settings.LLM_HEARTBEAT_SECONDS * 4 * 1000))


def _redis() -> Redis:
    return queue_connection(LLM_QUEUE)


def slot_acquire(*, concurrency_key: str, job_id: str) -> bool:
    """Take a running slot of the key for this job (or renew the one it holds)."""
    script = _redis().register_script(_ACQUIRE)
    taken = script(
        keys=[concurrency_key_slots_key(concurrency_key)],
        args=[job_id, _lease_ms(), settings.LLM_CONCURRENCY_PER_KEY],
    )
    return bool(taken)


def slot_extend(*, concurrency_key: str, job_id: str) -> bool:
    """Renew the slot's lease (the heartbeat); False if the slot was lost."""
    script = _redis().register_script(_EXTEND)
    return bool(
        script(keys=[concurrency_key_slots_key(concurrency_key)], args=[job_id, _lease_ms()])
    )


def slot_release(*, concurrency_key: str, job_id: str) -> None:
    """Give the slot back at the end of the attempt."""
    _redis().zrem(concurrency_key_slots_key(concurrency_key), job_id)
