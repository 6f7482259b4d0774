"""The channel layer every socket uses: channels-redis's, with a receive that ends when cancelled.

redis-py can swallow a cancellation that lands as a blocking command answers
(redis/redis-py#2028): channels-redis's receive (a BZPOPMIN every 5 s) then goes on polling
forever, and whatever waits for it never ends: a socket's clean-up, a refused socket's denier
(Channels' own consumer), a server's shutdown. Here each receive runs in a task of its own; once
the caller is cancelled, that task is cancelled again, a moment apart, until it ends: a cancel
that lands at another moment is delivered.
"""

import asyncio
import logging
from typing import Any

from channels_redis.core import RedisChannelLayer as _RedisChannelLayer

__all__ = ["CANCEL_AGAIN_SECONDS", "CANCEL_AGAIN_TIMES", "RedisChannelLayer"]

logger = logging.getLogger(__name__)

CANCEL_AGAIN_SECONDS = 0.2
CANCEL_AGAIN_TIMES = 50
"""How often, and how many times at most, a receive that swallowed its cancellation is
cancelled again."""


class RedisChannelLayer(_RedisChannelLayer):  # type: ignore[misc]
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
