"""A threaded worker's database connections: a few, taken in turn by many threads.

Django opens one connection per thread and keeps it open (``CONN_MAX_AGE``). A worker running
200 calls at once on threads would hold 200 connections, plus one per job's heartbeat thread,
well past MariaDB's default ``max_connections`` of 151, while nearly all of them sit idle waiting
on the provider. So a threaded worker process (runtime/threaded_worker.py) calls ``install``: from
then on a thread may hold open connections only while it holds one of
``LLM_WORKER_DB_CONNECTIONS`` slots. A thread's first open connection takes a slot (waiting for
one when all are taken); closing its last one gives the slot back. The runner closes its
connection before a provider call and after each heartbeat (``release_connection``), and the
worker closes a job thread's connections when its job ends.

Waiting for a slot cannot deadlock: a thread only waits while it holds no connection at all, so
it holds no row lock and no transaction; every slot holder is doing database work it will
finish, then close. It is bounded all the same (``LLM_WORKER_DB_SLOT_WAIT_SECONDS``, shorter for
a caller that says so with ``slot_wait_limit``): a slot held by a thread stuck on a dead link
must not stop every other job, so a thread that waits that long gets ``ConnectionSlotTimeout``,
a ``DatabaseError`` its caller handles as a database outage.

A thread that already holds a slot never waits: a second connection it opens for a moment
(metrics/counters.py makes a missing counter row on a connection of its own, in the middle of a
transaction) rides on its slot, so the server may see one more connection for each thread doing
that at the moment.

**Reuse.** A job's thread ends, and its connections close with it; the next job's thread opened
new ones: a connect, its authentication and three statements of session set-up, five times per
turn of an agent run and its tool call, each one a MariaDB thread and a socket in TIME_WAIT. So
a closed connection that is clean (no transaction, no error, autocommit on) goes to an idle pool
of this process instead, and the next thread to open one takes it (the newest first), its
session already set up. The pool and the connections in use together stay within the slots. A
pooled connection is used again only within ``LLM_WORKER_DB_IDLE_SECONDS`` of its return (the
worker's monitor closes those idle longer, so a quiet worker gives its connections back to the
server; 0 turns the pool off) and ``CONN_MAX_AGE`` of its opening, and only if its socket has
nothing to read (a server that closed or killed the session has sent an EOF or an error): no
round trip to check it. A path that froze meanwhile fails its first query within the read
bound, as a connection held open across it would (``bound_database_waits``). A forked child
never uses, nor closes, its copies of the parent's pooled connections (a close would end the
parent's session). MariaDB/MySQL and PostgreSQL only.

Nothing is installed in the web process, the forking workers or the commands, where
``release_connection`` does nothing and connections are reused as usual.
"""

import logging
import os
import select
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import OperationalError, connections

__all__ = [
    "ConnectionSlotTimeout",
    "bound_database_waits",
    "install",
    "prune_idle",
    "release_connection",
    "slot_wait_limit",
    "slots_in_use",
]

logger = logging.getLogger(__name__)

SLOT_WAIT_WARNING_SECONDS = 30.0
"""A thread still waiting for a connection slot after this long logs a warning (and waits on):
every slot held that long means database work that slow, or a connection nobody closed."""

_slots: threading.BoundedSemaphore | None = None
_limit = 0
_wrapped: set[type] = set()
_open_by_thread: dict[int, int] = {}
"""Open connections per thread that holds a slot (thread ident -> count)."""
_open_lock = threading.Lock()
_wait_limit = threading.local()
_idle: dict[tuple[str, str], list[tuple[Any, float, float]]] = {}
"""Pooled connections by (alias, connection parameters): (raw connection, opened, returned),
monotonic seconds, the newest last."""
_idle_lock = threading.Lock()
_inherited: list[Any] = []
"""A forked child's copies of its parent's pooled connections: kept, so that nothing closes them
(see ``_forget_slots_after_fork``)."""
_POOLED_VENDORS = ("mysql", "postgresql")


class ConnectionSlotTimeout(OperationalError):
    """No database connection slot came free in time."""


@contextmanager
def slot_wait_limit(seconds: float) -> Iterator[None]:
    """Within the block, this thread waits at most ``seconds`` for a slot (the heartbeat: a
    beat waiting long on the database would let the job's lock lapse)."""
    previous = getattr(_wait_limit, "seconds", None)
    _wait_limit.seconds = seconds
    try:
        yield
    finally:
        _wait_limit.seconds = previous


def install(limit: int) -> None:
    """Bound this process's threads holding database connections to ``limit`` (once)."""
    global _slots, _limit
    if _slots is not None:
        if limit != _limit:
            raise RuntimeError(f"database connection slots already installed ({_limit})")
        return
    _slots, _limit = threading.BoundedSemaphore(limit), limit
    for alias in connections:
        _wrap(type(connections[alias]))


def release_connection() -> None:
    """Close this thread's database connections if this process bounds them (a threaded worker),
    giving their slot to other threads; elsewhere keep them open for reuse."""
    if _slots is not None:
        connections.close_all()


def slots_in_use() -> int:
    """Threads of this process holding a database connection now (0 when nothing is
    installed)."""
    with _open_lock:
        return len(_open_by_thread)


def _pool_key(wrapper: Any, conn_params: Any) -> tuple[str, str]:
    return (wrapper.alias, repr(sorted(conn_params.items())))


def _reusable(wrapper: Any, raw: Any) -> bool:
    """Whether a connection this thread is closing is clean enough for another thread."""
    if (
        wrapper.vendor not in _POOLED_VENDORS
        or wrapper.in_atomic_block
        or wrapper.needs_rollback
        or wrapper.errors_occurred
        or not wrapper.autocommit
        or getattr(wrapper, "_llmops_pool_key", None) is None
    ):
        return False
    max_age = wrapper.settings_dict.get("CONN_MAX_AGE")
    if max_age is not None and time.monotonic() - wrapper._llmops_opened >= max_age:
        return False
    try:
        if wrapper.vendor == "postgresql":
            from psycopg.pq import TransactionStatus

            return bool(raw.info.transaction_status == TransactionStatus.IDLE)
        return bool(raw.get_autocommit()) and not _has_input(raw)
    except Exception:
        return False


def _has_input(raw: Any) -> bool:
    """Whether the connection's socket has something to read, or is closed: on an idle
    connection, the server's EOF or error (it closed or killed the session)."""
    readable, _, _ = select.select([raw.fileno()], [], [], 0)
    return bool(readable)


def _check_in(wrapper: Any) -> bool:
    """Keep the closing connection for the next thread; False to close it for real."""
    raw = wrapper.connection
    if raw is None or not settings.LLM_WORKER_DB_IDLE_SECONDS or not _reusable(wrapper, raw):
        return False
    now = time.monotonic()
    with _idle_lock:
        entries = _idle.setdefault(wrapper._llmops_pool_key, [])
        if sum(len(e) for e in _idle.values()) >= _limit:
            return False
        entries.append((raw, wrapper._llmops_opened, now))
    return True


def _check_out(wrapper: Any, key: tuple[str, str]) -> Any:
    """The newest pooled connection for these parameters that is still good, or None. Those
    idle too long, or found closed by the server, are closed on the way."""
    prune_idle()
    while True:
        with _idle_lock:
            entries = _idle.get(key)
            if not entries:
                return None
            raw, opened, _returned = entries.pop()
        try:
            dead = _has_input(raw)
        except Exception:
            dead = True
        if not dead:
            break
        _close_quietly(raw)
    wrapper._llmops_opened = opened
    wrapper._llmops_reused = True
    return raw


def prune_idle() -> int:
    """Close the pooled connections idle longer than ``LLM_WORKER_DB_IDLE_SECONDS``; how many
    (the threaded worker's monitor calls it every beat)."""
    limit = time.monotonic() - settings.LLM_WORKER_DB_IDLE_SECONDS
    stale: list[Any] = []
    with _idle_lock:
        for entries in _idle.values():
            stale.extend(entry[0] for entry in entries if entry[2] < limit)
            entries[:] = [entry for entry in entries if entry[2] >= limit]
    for raw in stale:
        _close_quietly(raw)
    return len(stale)


def _close_quietly(raw: Any) -> None:
    try:
        raw.close()
    except Exception:
        pass


def _take_slot(wrapper: Any) -> None:
    assert _slots is not None
    if getattr(wrapper, "_llmops_slot_thread", None) is not None:
        return  # a reconnect of a connection that still counts
    thread = threading.get_ident()
    with _open_lock:
        if thread in _open_by_thread:  # this thread holds a slot: ride on it
            _open_by_thread[thread] += 1
            wrapper._llmops_slot_thread = thread
            return
    limit = getattr(_wait_limit, "seconds", None)
    if limit is None:
        limit = settings.LLM_WORKER_DB_SLOT_WAIT_SECONDS
    waited = 0.0
    while True:
        step = max(0.0, min(SLOT_WAIT_WARNING_SECONDS, limit - waited))
        if _slots.acquire(timeout=step):
            break
        waited += step
        if waited >= limit:
            raise ConnectionSlotTimeout(
                f"no database connection slot came free in {limit:g} s (all {_limit} of "
                "LLM_WORKER_DB_CONNECTIONS held); see LLM_WORKER_DB_SLOT_WAIT_SECONDS"
            )
        logger.warning(
            "waited %.0f s for one of %d database connection slots; waiting on", waited, _limit
        )
    with _open_lock:
        _open_by_thread[thread] = 1
    wrapper._llmops_slot_thread = thread


def _give_slot(wrapper: Any) -> None:
    thread = getattr(wrapper, "_llmops_slot_thread", None)
    if thread is None:
        return
    wrapper._llmops_slot_thread = None
    with _open_lock:
        _open_by_thread[thread] -= 1
        if _open_by_thread[thread]:
            return
        del _open_by_thread[thread]
    assert _slots is not None
    _slots.release()


def _forget_slots_after_fork() -> None:
    """A forked child (an agent tool's process, agents/tool_processes.py) holds no slot: the
    threads that held them, and maybe the lock, stayed in the parent. It counts its own."""
    global _open_lock, _slots, _idle_lock
    _open_lock = threading.Lock()
    _open_by_thread.clear()
    # The parent's sessions: a close here would end them for the parent too (a quit on the
    # shared socket), and garbage collection would close them. Kept, never used.
    _idle_lock = threading.Lock()
    _inherited.extend(entry[0] for entries in _idle.values() for entry in entries)
    _idle.clear()
    if _slots is not None:
        _slots = threading.BoundedSemaphore(_limit)


os.register_at_fork(after_in_child=_forget_slots_after_fork)


def _wrap(wrapper_class: type) -> None:
    """Take a slot just before the backend opens a connection, give it back once it is closed.
    ``get_new_connection`` and ``_close`` are the two places every open and close goes through
    (``connect``, ``close``, ``close_if_unusable_or_obsolete``, a failed health check)."""
    if wrapper_class in _wrapped:
        return
    _wrapped.add(wrapper_class)
    open_connection = getattr(wrapper_class, "get_new_connection")  # noqa: B009
    close_connection = getattr(wrapper_class, "_close")  # noqa: B009
    init_state = getattr(wrapper_class, "init_connection_state")  # noqa: B009

    def get_new_connection(self: Any, conn_params: Any) -> Any:
        _take_slot(self)
        try:
            self._llmops_reused = False
            if self.vendor not in _POOLED_VENDORS:
                return open_connection(self, conn_params)
            key = _pool_key(self, conn_params)
            raw = _check_out(self, key)
            if raw is None:
                raw = open_connection(self, conn_params)
                self._llmops_opened = time.monotonic()
            self._llmops_pool_key = key
            return raw
        except BaseException:
            _give_slot(self)
            raise

    def init_connection_state(self: Any) -> Any:
        if getattr(self, "_llmops_reused", False):
            self._llmops_reused = False
            return None  # set up by the thread that opened it: a session keeps its settings
        return init_state(self)

    def _close(self: Any) -> Any:
        try:
            if _check_in(self):
                return None
            return close_connection(self)
        finally:
            self._llmops_pool_key = None
            _give_slot(self)

    setattr(wrapper_class, "get_new_connection", get_new_connection)  # noqa: B010
    setattr(wrapper_class, "init_connection_state", init_connection_state)  # noqa: B010
    setattr(wrapper_class, "_close", _close)  # noqa: B010


def bound_database_waits(seconds: int | None = None) -> None:
    """Bound every read and write on this process's database connections opened from now on
    (MariaDB/MySQL ``read_timeout``, ``write_timeout``; PostgreSQL ``tcp_user_timeout`` and
    keepalives; ``LLM_WORKER_DB_TIMEOUT_SECONDS`` by default): a frozen
    path (bytes stop, the connection stays open) then fails a query within the bound instead of
    hanging it for the kernel's retransmission minutes. For the processes that hold claims (the
    workers) and the loops; not the web process or commands, where a migration may run long.
    An option the database URL sets wins."""
    bound = int(seconds or settings.LLM_WORKER_DB_TIMEOUT_SECONDS)
    for alias in connections:
        config = connections.settings[alias]
        if config.get("ENGINE", "").endswith("mysql"):
            options = config.setdefault("OPTIONS", {})
            options.setdefault("read_timeout", bound)
            options.setdefault("write_timeout", bound)
        elif config.get("ENGINE", "").endswith("postgresql"):
            # libpq has no read timeout: bytes unacknowledged for the bound fail the connection
            # (tcp_user_timeout), and keepalive probes (answered by the server's kernel, so a
            # long query is not cut) find a path that froze while a query waited for its answer.
            options = config.setdefault("OPTIONS", {})
            options.setdefault("tcp_user_timeout", bound * 1000)
            options.setdefault("keepalives", 1)
            options.setdefault("keepalives_idle", max(1, bound // 4))
            options.setdefault("keepalives_interval", max(1, bound // 4))
            options.setdefault("keepalives_count", 3)
