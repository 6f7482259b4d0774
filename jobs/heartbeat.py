"""A running attempt's claim: its Redis lock, its concurrency slot and its row's ``heartbeat_at``,
kept fresh while the attempt may rightly run, and its self-fencing lease.

A host proves it lives on either of two paths (DESIGN.md, invariant 12): the job's lock in Redis
and its row's ``heartbeat_at`` in the database. The reconciler takes a running job over only when
both are gone (jobs/reconciler.py). So each path is renewed on a thread of its own, and each wait
on it is bounded (Redis by ``LLM_REDIS_SOCKET_TIMEOUT``, the database by
``LLM_WORKER_DB_TIMEOUT_SECONDS`` and a slot wait of one beat): a frozen database path never stalls
the lock's renewal behind a dead socket, nor a frozen Redis path the row's.

The lease: a third thread, which never waits on either, watches when each path was last renewed.
When neither has been for ``lease_seconds()`` (by default the lock's ttl less two beats: 20 s), the
host may be cut off from both, and the reconciler may take the job over once the lock lapses and
the row goes stale: the attempt stops its call in flight first (``CallDeadline.fence``), so that
two calls of one job overlap only as long as the network holds a closed connection. A path that
heals renews the claim again; the fenced call is recorded as of unknown outcome (its upper bound),
or, if the job was taken over meanwhile, refused or booked as a correction.

Each renewal counts from the moment it was sent: the lock's new ttl and the row's new
``heartbeat_at`` start no earlier, so the lease always ends before either lapses.
"""

import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone
from redis.exceptions import LockError, LockNotOwnedError

from jobs.concurrency_keys import slot_extend
from jobs.leases import lease_seconds, lock_ttl
from jobs.models import LlmJob
from providers.call_deadline import CallDeadline
from runtime.db_connections import release_connection, slot_wait_limit

__all__ = ["Heartbeat"]

logger = logging.getLogger(__name__)

REDIS, DATABASE = "redis", "database"


class Heartbeat:
    """Renews the claim until ``until`` (monotonic), which is the call's deadline while the call
    runs, then the end of the recording of its result (``hold_until``). Past it the beats stop,
    so that a thread stuck beyond every deadline loses its claim and the reconciler takes the job
    over; at the call's deadline it also cuts the call off at its sockets
    (providers/call_deadline.py), as a backstop to the call's own bound.

    The lock must not keep its token in a thread-local (redis-py's default: ``reacquire()`` from
    another thread then fails with AttributeError). Any error in a beat (Redis or the database
    gone, anything else) is logged and the next beat runs. ``attempt`` (the runner's) makes the
    row's beat touch only that attempt: never a newer one another worker runs after a takeover.
    """

    def __init__(
        self,
        job_id: UUID,
        lock: Any,
        concurrency_key: str = "",
        deadline: CallDeadline | None = None,
        on_cancel_requested: Callable[[], Any] | None = None,
        *,
        attempt: int | None = None,
    ) -> None:
        self.job_id, self.lock, self.concurrency_key = job_id, lock, concurrency_key
        self.deadline = deadline
        self.on_cancel_requested = on_cancel_requested
        self.attempt = attempt
        self.until = deadline.ends_at if deadline is not None else math.inf
        self.stopped = threading.Event()
        self.beats = 0
        """Renewals tried on the lock's path (each beat tries both paths)."""
        self.database_beats = 0
        now = time.monotonic()
        self.renewed = {REDIS: now, DATABASE: now}
        """When each path's last successful renewal was sent (monotonic)."""
        self.fenced = False
        self.recording = False
        """The call has ended and its result is being recorded (``hold_until(recording=True)``)."""
        self._wakes: list[threading.Event] = []
        self.threads = [
            self._thread("lock", self._beats, REDIS),
            self._thread("row", self._beats, DATABASE),
            self._thread("lease", self._watch),
        ]

    def _thread(self, name: str, target: Callable[..., None], *args: Any) -> threading.Thread:
        wake = threading.Event()
        self._wakes.append(wake)
        # Started in the job's log context: its lines carry the job's fields too.
        return threading.Thread(
            target=contextvars.copy_context().run,
            args=(target, wake, *args),
            daemon=True,
            name=f"heartbeat-{name}-{self.job_id}",
        )

    def __enter__(self) -> "Heartbeat":
        now = time.monotonic()
        self.renewed = {REDIS: now, DATABASE: now}  # the claim was just taken on both
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self._wake_all()
        for thread in self.threads:
            # A beat blocked on a dead path returns within its bound; nothing waits for it.
            thread.join(timeout=0.5 if thread.name.startswith("heartbeat-row") else 10)

    def call_starts(self) -> None:
        """The request leaves now: its deadline counts from here, and the claim is kept until
        then (not past it)."""
        if self.deadline is not None:
            self.deadline.restart()
            self.hold_until(self.deadline.ends_at)

    def hold_until(self, until: float, *, recording: bool = False) -> None:
        """Keep the claim until ``until`` (monotonic) instead: while the call waits for its
        paced slot, or (``recording``) once it has ended and its result is being recorded."""
        self.recording = self.recording or recording
        self.until = until
        self._wake_all()

    def _wake_all(self) -> None:
        for wake in self._wakes:
            wake.set()

    # --- the two paths -----------------------------------------------------------------------

    def beat(self) -> None:
        """One renewal on each path, in turn (the threads do each on its own)."""
        self._beat_redis()
        self._beat_database()

    def _beats(self, wake: threading.Event, path: str) -> None:
        beat = self._beat_redis if path == REDIS else self._beat_database
        interval = settings.LLM_HEARTBEAT_SECONDS
        next_beat = time.monotonic() + interval
        try:
            while not self.stopped.is_set():
                now, until = time.monotonic(), self.until
                if now >= until:
                    wake.wait()  # until told to hold the claim again, or to stop
                elif now >= next_beat:
                    beat()
                    next_beat = time.monotonic() + interval
                    continue
                else:
                    wake.wait(min(next_beat, until) - now)
                wake.clear()
        finally:
            if path == DATABASE:
                connection.close()

    def _beat_redis(self) -> None:
        sent = time.monotonic()
        renewed = False
        try:
            renewed = bool(self.lock.extend(lock_ttl(), replace_ttl=True))
            if not renewed:
                logger.warning("job %s: lock could not be extended", self.job_id)
        except LockNotOwnedError:
            renewed = self._lock_again()
        except LockError:
            logger.warning("job %s: lock lost while running (expired or taken over)", self.job_id)
        except Exception:
            logger.exception("job %s: heartbeat could not extend the lock", self.job_id)
        if self.concurrency_key:
            try:
                if not slot_extend(concurrency_key=self.concurrency_key, job_id=str(self.job_id)):
                    logger.warning("job %s: its concurrency slot was lost", self.job_id)
            except Exception:
                logger.exception("job %s: heartbeat could not extend its slot", self.job_id)
        if renewed:
            self.renewed[REDIS] = sent
        self.beats += 1

    def _lock_again(self) -> bool:
        """The lock's key is gone (Redis flushed, failed over) or another token holds it. Taken
        again only if nobody holds it: the row's heartbeat kept the job from being taken over."""
        token = self.lock.local.token
        if token is not None and self.lock.redis.set(self.lock.name, token, nx=True, ex=lock_ttl()):
            logger.warning("job %s: its lock was gone from Redis; taken again", self.job_id)
            return True
        logger.warning("job %s: lock lost while running (expired or taken over)", self.job_id)
        return False

    def _beat_database(self) -> None:
        sent, now = time.monotonic(), timezone.now()
        try:
            # A beat waits for a database slot no longer than a beat, and every read and write
            # on its connection is bounded (LLM_WORKER_DB_TIMEOUT_SECONDS): a frozen path fails
            # it, and the next one tries again.
            with slot_wait_limit(settings.LLM_HEARTBEAT_SECONDS):
                running = LlmJob.objects.filter(id=self.job_id, status=LlmJob.Status.RUNNING)
                if self.attempt is not None:
                    running = running.filter(attempts=self.attempt)
                if running.filter(cancel_requested_at__isnull=True).update(heartbeat_at=now):
                    self.renewed[DATABASE] = sent
                elif running.update(heartbeat_at=now):
                    self.renewed[DATABASE] = sent
                    # A cancel was asked for and its Redis key missed (jobs/cancellation.py).
                    if self.on_cancel_requested is not None:
                        self.on_cancel_requested()
        except Exception:
            logger.exception("job %s: heartbeat could not reach the database", self.job_id)
            close_old_connections()
            connection.close()
        release_connection()  # a threaded worker shares a few connections between its threads
        self.database_beats += 1

    # --- the lease -----------------------------------------------------------------------------

    def _watch(self, wake: threading.Event) -> None:
        """At the call's deadline, cut it off; while the claim is held, fence the attempt once it
        was renewed on neither path for the lease."""
        step = min(1.0, settings.LLM_HEARTBEAT_SECONDS / 4)
        lease = lease_seconds()
        passed: float | None = None
        while not self.stopped.is_set():
            now, until = time.monotonic(), self.until
            if now >= until:
                if passed != until:
                    passed = until
                    self._past(until)
            elif not self.fenced and now - max(self.renewed.values()) > lease:
                self._fence(now - max(self.renewed.values()))
            wake.wait(step if now < until else None)
            wake.clear()

    def _fence(self, unrenewed: float) -> None:
        self.fenced = True
        stopped = self.deadline.fence() if self.deadline is not None else False
        logger.error(
            "job %s: its claim was renewed neither in Redis nor in the database for %.1f s "
            "(lease %g s): %s before another worker may take the job over (self-fencing)",
            self.job_id,
            unrenewed,
            lease_seconds(),
            "its call in flight is cut off" if stopped else "its call will not be sent",
        )

    def _past(self, until: float) -> None:
        if not self.recording:
            if self.deadline is None or self.fenced:
                return  # a fenced call was cut already
            cut = self.deadline.cut()
            logger.warning(
                "job %s: its call passed its deadline of %g s%s; its lock, slot and heartbeat "
                "are no longer extended",
                self.job_id,
                self.deadline.seconds,
                ": cut off at its sockets" if cut else "",
            )
        else:
            logger.warning(
                "job %s: recording its result passed its bound; its lock, slot and heartbeat "
                "are no longer extended",
                self.job_id,
            )
