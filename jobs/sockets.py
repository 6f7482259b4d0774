"""What an open /ws/jobs/ socket keeps in Redis beside channels-redis's own keys: its place among
its user's connections (the per-user cap, shared by every web process), and its group
membership, renewed so that a Redis restart or channels-redis's one-day ``group_expiry`` never
leaves a socket open and deaf.

Both go through the channel layer's own connection (channels-redis, llmops/settings.py
``CHANNEL_LAYERS``): the same Redis, timeouts and event loop as the socket's events.
"""

import time
from typing import Any

from channels_redis.core import RedisChannelLayer
from django.conf import settings

from llmops.queues import KEY_PREFIX

__all__ = ["socket_register", "socket_renew", "socket_unregister", "socket_rejoin"]

# Drop the stale entries (a process killed with its sockets open), then admit the newcomer only
# below the cap: one script, so two processes never both admit the twentieth socket.
_REGISTER = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) == false
   and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
    return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


def _connections_key(user_id: int) -> str:
    return f"{KEY_PREFIX}ws-connections:{user_id}"


def _stale_after() -> float:
    """A socket renews its entry every WS_REAUTH_SECONDS; three missed renewals mean its process
    is gone (a margin keeps a busy event loop's late renewal from counting)."""
    return 3 * settings.WS_REAUTH_SECONDS + 10


def _connection(layer: RedisChannelLayer, name: str) -> Any:
    return layer.connection(layer.consistent_hash(name))


async def socket_register(*, layer: RedisChannelLayer, user_id: int, channel_name: str) -> bool:
    """Count the socket among its user's open ones; False (not counted) if the user already has
    WS_MAX_CONNECTIONS_PER_USER."""
    key = _connections_key(user_id)
    now = time.time()
    admitted = await _connection(layer, key).eval(
        _REGISTER,
        1,
        key,
        now - _stale_after(),
        now,
        channel_name,
        settings.WS_MAX_CONNECTIONS_PER_USER,
        int(_stale_after()) + 1,
    )
    return bool(admitted)


async def socket_renew(*, layer: RedisChannelLayer, user_id: int, channel_name: str) -> None:
    """Keep the socket's entry fresh (and back after a Redis restart)."""
    key = _connections_key(user_id)
    connection = _connection(layer, key)
    await connection.zadd(key, {channel_name: time.time()})
    await connection.expire(key, int(_stale_after()) + 1)


async def socket_unregister(*, layer: RedisChannelLayer, user_id: int, channel_name: str) -> None:
    key = _connections_key(user_id)
    await _connection(layer, key).zrem(key, channel_name)


async def socket_rejoin(*, layer: RedisChannelLayer, group: str, channel_name: str) -> bool:
    """channels-redis's ``group_add`` (the same key and expiry), which also says whether the
    socket had left the group: True when Redis had lost it (restarted or flushed), so the
    events sent meanwhile never reached it."""
    key = layer._group_key(group)
    connection = _connection(layer, group)
    added = await connection.zadd(key, {channel_name: time.time()})
    await connection.expire(key, layer.group_expiry)
    return bool(added)
