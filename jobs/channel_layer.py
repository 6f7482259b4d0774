"""The channel layer every socket uses: channels-redis's, with a receive that ends when cancelled
and a send to several groups in fewer Redis round trips.

redis-py can swallow a cancellation that lands as a blocking command answers
(redis/redis-py#2028): channels-redis's receive (a BZPOPMIN every 5 s) then goes on polling
forever, and whatever waits for it never ends: a socket's clean-up, a refused socket's denier
(Channels' own consumer), a server's shutdown. Here each receive runs in a task of its own; once
the caller is cancelled, that task is cancelled again, a moment apart, until it ends: a cancel
that lands at another moment is delivered.
"""

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from channels_redis.core import RedisChannelLayer as _RedisChannelLayer

__all__ = ["CANCEL_AGAIN_SECONDS", "CANCEL_AGAIN_TIMES", "RedisChannelLayer"]

logger = logging.getLogger(__name__)

CANCEL_AGAIN_SECONDS = 0.2
CANCEL_AGAIN_TIMES = 50
"""How often, and how many times at most, a receive that swallowed its cancellation is
cancelled again."""


_SEND_LUA = """
local over_capacity = 0
local current_time = ARGV[#ARGV - 2]
local expiry = ARGV[#ARGV - 1]
local oldest = ARGV[#ARGV]
for i=1,#KEYS do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, oldest)
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[i + #KEYS]) then
        redis.call('ZADD', KEYS[i], current_time, ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        over_capacity = over_capacity + 1
    end
end
return over_capacity
"""
"""channels-redis's group send script, with its trim of each channel's expired messages (a
pipeline of its own upstream, one more round trip) done first, in the script."""


class RedisChannelLayer(_RedisChannelLayer):  # type: ignore[misc]
    async def group_send_many(self, groups: list[str], message: dict[str, Any]) -> None:
        """``group_send`` of ``message`` to each of ``groups``, as channels-redis sends it (each
        group's expired members dropped, then each member's channel given the message unless
        it is at capacity, its expired messages dropped first), in fewer round trips: every
        group's members are read in one pipeline per Redis host (upstream: two commands per
        group), and a group with members costs one script call per host (upstream: a
        pipeline, then the script). An event nobody watches (most job and run events: the
        groups are empty) is one round trip instead of two per group."""
        members = await self.group_members(groups)
        await self.send_to_members(groups, message, members)

    async def group_members(self, groups: Iterable[str]) -> dict[str, list[str]]:
        """Each group's members now, its expired ones dropped first: one pipeline per Redis
        host for all of them (a batch of events reads every group it names at once)."""
        now = time.time()
        keys_by_host: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for group in dict.fromkeys(groups):
            assert self.require_valid_group_name(group), "Group name not valid"
            keys_by_host[self.consistent_hash(group)].append((group, self._group_key(group)))
        members: dict[str, list[str]] = {}
        for host, keys in keys_by_host.items():
            pipe = self.connection(host).pipeline(transaction=False)
            for _group, key in keys:
                pipe.zremrangebyscore(key, min=0, max=int(now) - self.group_expiry)
                pipe.zrange(key, 0, -1)
            replies = await pipe.execute()
            for index, (group, _key) in enumerate(keys):
                members[group] = [name.decode("utf8") for name in replies[2 * index + 1]]
        return members

    async def send_to_members(
        self, groups: list[str], message: dict[str, Any], members: dict[str, list[str]]
    ) -> None:
        """``message`` to the members of each of ``groups`` read by ``group_members``."""
        for group in groups:
            if members[group]:
                await self._send_to_members(group, members[group], message)

    async def _send_to_members(
        self, group: str, channel_names: list[str], message: dict[str, Any]
    ) -> None:
        by_host, serialized, capacity = self._map_channel_keys_to_connection(channel_names, message)
        for host, channel_keys in by_host.items():
            now = time.time()
            args = [serialized[key] for key in channel_keys]
            args += [capacity[key] for key in channel_keys]
            args += [now, self.expiry, int(now) - int(self.expiry)]
            over = await self.connection(host).eval(
                _SEND_LUA, len(channel_keys), *channel_keys, *args
            )
            if over > 0:
                logger.info(
                    "%s of %s channels over capacity in group %s", over, len(channel_names), group
                )

    async def receive(self, channel: str) -> Any:
        receiving = asyncio.ensure_future(super().receive(channel))
        try:
            return await asyncio.shield(receiving)
        except asyncio.CancelledError:
            await _cancel_until_done(receiving, channel)
            raise


async def _cancel_until_done(task: asyncio.Future[Any], channel: str) -> None:
    for _ in range(CANCEL_AGAIN_TIMES):
        if task.done():
            return
        task.cancel()
        try:
            await asyncio.wait({task}, timeout=CANCEL_AGAIN_SECONDS)
        except asyncio.CancelledError:
            pass  # cancelled again meanwhile (a clean-up cancels what it waits on too): go on
    if not task.done():
        logger.warning("the channel-layer receive of %s would not end", channel)
