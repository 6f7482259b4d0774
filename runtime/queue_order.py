"""The llm queue's three lanes (jobs/priorities.py): every push of an RQ job id to the llm
queue's list goes through one Lua script that puts it in its lane, whoever pushes it (a submit,
a bulk insert, a retry or hold that the scheduler moves in when due, the reconciler).

rq's ``Queue.push_job_id`` is replaced for the llm queue alone (every other queue pushes as rq
does): rq's scheduler builds plain ``Queue`` objects, so a subclass would miss its pushes.
``at_front`` (a job put back at a warm shutdown, a deadline that is near) still goes to the very
front. Cost: O(1) for a high or low push and for a normal one with no low job waiting; with low
jobs waiting, a normal push reads the low lane from the back in pages of 256 ids and inserts
before its first (LINSERT, O(n) in Redis).
"""

from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.commands.core import Script
from rq.queue import Queue

from llmops.queues import LLM_QUEUE

__all__ = ["PUSH_SCRIPT", "install", "promote_to_front"]

PUSH_SCRIPT = """
local key, id, front = KEYS[1], ARGV[1], ARGV[2] == '1'
local lane = string.sub(id, 1, 2)
if front then return redis.call('LPUSH', key, id) end
if lane == 'l-' then return redis.call('RPUSH', key, id) end
if lane == 'h-' then
  -- behind the high jobs already waiting: before the first id from the front that is not high
  local start = 0
  while true do
    local page = redis.call('LRANGE', key, start, start + 255)
    if #page == 0 then return redis.call('RPUSH', key, id) end
    for _, e in ipairs(page) do
      if string.sub(e, 1, 2) ~= 'h-' then return redis.call('LINSERT', key, 'BEFORE', e, id) end
    end
    start = start + 256
  end
end
-- normal: before the first low job, found from the back
local pivot, stop = nil, -1
while true do
  local page = redis.call('LRANGE', key, stop - 255, stop)
  if #page == 0 then break end
  for i = #page, 1, -1 do
    if string.sub(page[i], 1, 2) ~= 'l-' then
      if pivot then return redis.call('LINSERT', key, 'BEFORE', pivot, id) end
      return redis.call('RPUSH', key, id)
    end
    pivot = page[i]
  end
  if #page < 256 then break end
  stop = stop - 256
end
if pivot then return redis.call('LINSERT', key, 'BEFORE', pivot, id) end
return redis.call('RPUSH', key, id)
"""

PROMOTE_SCRIPT = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  return redis.call('LPUSH', KEYS[1], ARGV[1])
end
return 0
"""

_rq_push_job_id = Queue.push_job_id
_scripts: dict[str, Script] = {}
"""Each script once per process (its SHA-1 computed once); called with the client at hand."""


def _script(connection: Redis, source: str) -> Script:
    if source not in _scripts:
        _scripts[source] = connection.register_script(source)
    return _scripts[source]


def _push_job_id(
    self: Queue, job_id: str, pipeline: Pipeline | None = None, at_front: bool = False
) -> Any:
    if self.name != LLM_QUEUE:
        return _rq_push_job_id(self, job_id, pipeline=pipeline, at_front=at_front)
    client = pipeline if pipeline is not None else self.connection
    script = _script(self.connection, PUSH_SCRIPT)
    return script(keys=[self.key], args=[job_id, "1" if at_front else "0"], client=client)


def install() -> None:
    """Replace ``Queue.push_job_id`` (once; jobs/apps.py at start-up)."""
    Queue.push_job_id = _push_job_id  # type: ignore[method-assign]


def promote_to_front(queue: Queue, rq_job_id: str) -> bool:
    """Move a waiting RQ job id to the front of its queue; False if it was not in the list
    (already taken by a worker, or scheduled)."""
    script = _script(queue.connection, PROMOTE_SCRIPT)
    return bool(script(keys=[queue.key], args=[rq_job_id], client=queue.connection))
