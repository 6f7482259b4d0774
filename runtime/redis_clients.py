"""One Redis client and one rq ``Queue`` per process and queue, for the per-job path.

django-rq builds a new Redis client on every ``get_queue()``/``get_connection()``: a new
connection pool, so a new TCP connection and its handshake (``HELLO``, ``CLIENT SETINFO`` twice,
``SELECT``) for every submit and every job, and a new ``Queue`` that asks the server its
version (``INFO``) before its first enqueue. These are kept instead. A redis-py client is
thread-safe (its pool lends each caller a connection of its own) and fork-safe (a pool used in
a forked child drops the parent's connections and opens its own), so one client serves every
thread of a process and a forked work horse.

Keyed by the queue's connection settings as they are now (``RQ_QUEUES``), so that a test that
points a queue at another Redis gets a client for that one.
"""

import threading
from typing import Any

import django_rq
import redis
from django_rq import settings as django_rq_settings
from redis import Redis
from redis.driver_info import DriverInfo
from rq import Queue

__all__ = ["named_once", "queue", "queue_connection"]

# redis-py names itself to the server on every new connection (CLIENT SETINFO), reading its own
# version from the installed packages' metadata each time: about 2 ms of CPU a connection. A
# forking worker's work horse opens its connections anew for every job; read once here.
_DRIVER_INFO = DriverInfo(lib_version=redis.__version__)


def named_once(client: Redis) -> Redis:
    """Let ``client``'s new connections name themselves without the metadata lookup."""
    client.connection_pool.connection_kwargs.setdefault("driver_info", _DRIVER_INFO)
    return client


_queues: dict[tuple[str, ...], Queue] = {}
_lock = threading.Lock()


def _key(name: str) -> tuple[str, ...]:
    config: dict[str, Any] = django_rq_settings.QUEUES[name]
    return (name, *(f"{option}={config[option]!r}" for option in sorted(config)))


def queue(name: str) -> Queue:
    """django-rq's queue ``name``, built once per process (and per connection settings)."""
    key = _key(name)
    found = _queues.get(key)
    if found is None:
        with _lock:
            found = _queues.get(key)
            if found is None:
                found = _queues[key] = django_rq.get_queue(name)
                named_once(found.connection)
    return found


def queue_connection(name: str) -> Redis:
    """The Redis client of queue ``name``, shared by every caller of this process."""
    return queue(name).connection
