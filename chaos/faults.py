"""The drill's faults that hold until they happened, one small class each, ticked by the
conductor: a trickling call, a budget disabled and enabled again, the reconciler stopped, a
worker killed while its jobs wait on the rate limiter, a token revoked under its open socket.

Each one notes in the record what really happened, so that its check can say when the fault
did not happen instead of passing on zeros.
"""

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import OperationalError
from django.utils import timezone

from chaos import events
from chaos.plan import DrillOptions, Phase, call_deadline_seconds
from chaos.processes import Process, Stack
from chaos.provider import FakeProvider
from chaos.record import (
    BudgetToggleEvent,
    DrillRecord,
    KillEvent,
    ReconcilerStopEvent,
    RevokeEvent,
    TrickleEvent,
)
from chaos.setup import drill_budget_set_enabled, drill_token_create, drill_token_revoke
from chaos.socket_watch import SocketWatch
from jobs.breaker import PROVIDER
from jobs.models import LlmJob
from ledger.models import CostEntry
from ratelimits.models import RateLimit

__all__ = [
    "BudgetToggle",
    "KillWaiting",
    "ReconcilerStop",
    "Revoke",
    "Trickle",
    "trickle_in_flight",
]

LOOK_EVERY_SECONDS = 0.5
"""Looks that cost a query or an HTTP call are made at most this often."""
TRICKLE_WAIT_SECONDS = 20.0
"""The trickle fault stays on until a call trickled, or this long (the check then says so)."""
KILL_WAITING_MODEL = "claude-haiku-4-5"
"""Half the drill's jobs: the other model keeps the workers busy meanwhile."""
KILL_WAITING_SHARE = 0.4
"""The limit is this share of the calls the model made in the last minute. The limiter paces
calls one every 60/limit s (its window may have been flushed just before: pacing, not the
window, makes them wait), so with calls arriving at more than twice that spacing a line of
them waits on the limiter in the workers, within LLM_RATE_LIMIT_MAX_WAIT_SECONDS (75 s in the
drill); a far lower limit spaces the line by more than that, and they go back to the queue."""
KILL_WAITING_MIN_RPM = 20
"""Not lower (see above): with fewer calls than that in the last minute, nothing waits, and the
check says the fault did not happen."""
KILL_WAITING_WANTED = 2
KILL_WAITING_MAX_SECONDS = 10.0
"""The kill waits this long, at most, for a worker to hold KILL_WAITING_WANTED jobs before
their claim; it kills anyway then, and the check says how many were held."""
REVOKE_HEAR_SECONDS = 15.0
"""The token is revoked once the socket heard an event, or after this."""
REVOKE_CLOSE_SECONDS = 10.0
"""The socket must be closed this soon after its token is deleted ("within a few seconds")."""
RECONCILER_EXIT_SECONDS = 60.0
DEADLOCK = 1213
"""MySQL/MariaDB's ER_LOCK_DEADLOCK: the transaction was rolled back, to be run again."""
DEADLOCK_SQLSTATE = "40P01"
"""PostgreSQL's deadlock_detected, the same."""
TRICKLE_CUT_GRACE_SECONDS = 5.0
"""A trickling call must be booked within its deadline and this: the heartbeat that cuts it
beats every two seconds in the drill."""


class _Fault:
    def __init__(
        self,
        *,
        phase: Phase,
        options: DrillOptions,
        record: DrillRecord,
        stack: Stack,
        provider: FakeProvider,
        user: User,
        say: Callable[[str], None],
        web_url: str = "",
    ) -> None:
        self.phase, self.options, self.record, self.stack = phase, options, record, stack
        self.provider, self.user, self.say, self.web_url = provider, user, say, web_url
        self._looked = -LOOK_EVERY_SECONDS

    def look_due(self, t: float) -> bool:
        if t - self._looked < LOOK_EVERY_SECONDS:
            return False
        self._looked = t
        return True

    def tick(self, t: float) -> None:
        raise NotImplementedError

    def done(self) -> bool:
        raise NotImplementedError

    def provider_faults(self, t: float) -> dict[str, float] | None:
        """Faults that replace every other on the provider now, or None."""
        return None

    def cleanup(self) -> None:
        """Undo whatever the fault left in place (an interrupted drill)."""


class Trickle(_Fault):
    """Every call trickles until the provider has trickled one."""

    armed = False

    def tick(self, t: float) -> None:
        event = self.record.trickle
        if t < self.phase.start or (event is not None and event.lifted_at is not None):
            return
        if event is None:
            event = self.record.trickle = TrickleEvent(t, call_deadline_seconds())
            self.armed = True
            self.say(f"{t:6.1f}s  trickle: the next call answers one byte a second")
            return
        # Looked at every tick (a moment): every call that ends meanwhile trickles.
        event.job_ids = self.provider.trickled()
        if event.job_ids or t - event.at > TRICKLE_WAIT_SECONDS:
            self.armed = False
            event.lifted_at = t
            self.say(f"{t:6.1f}s  trickle: {len(event.job_ids)} call(s) trickling, fault lifted")

    def provider_faults(self, t: float) -> dict[str, float] | None:
        return {"trickle": 1.0} if self.armed else None

    def done(self) -> bool:
        return self.record.trickle is not None and self.record.trickle.lifted_at is not None


class BudgetToggle(_Fault):
    """The drill's budget disabled at the phase's start, enabled again at its end, as staff
    would in the admin."""

    deadlocks = 0

    def tick(self, t: float) -> None:
        try:
            self._toggle(t)
        except OperationalError as exc:
            # Saving the budget under load can deadlock with the workers' reservations (InnoDB or
            # PostgreSQL picks the save as the victim): staff would save again; so does the drill.
            if exc.args[0] != DEADLOCK and getattr(exc.__cause__, "sqlstate", None) != (
                DEADLOCK_SQLSTATE
            ):
                raise
            self.deadlocks += 1
            if self.deadlocks == 1:
                self.record.notes.append(
                    "saving the drill's budget (enabled) met a deadlock with the workers' "
                    "reservations; saved again"
                )

    def _toggle(self, t: float) -> None:
        event = self.record.budget_toggle
        budget_id = self.record.budget_id
        if budget_id is None or t < self.phase.start:
            return
        if event is None:
            drill_budget_set_enabled(budget_id=budget_id, enabled=False)
            self.record.budget_toggle = BudgetToggleEvent(budget_id, t, timezone.now())
            self.say(f"{t:6.1f}s  budget {budget_id} disabled")
        elif event.enabled_at is None and t >= (self.phase.end or self.phase.start):
            self.cleanup()
            event.enabled_at, event.enabled_wall = t, timezone.now()
            self.say(f"{t:6.1f}s  budget {budget_id} enabled again")

    def cleanup(self) -> None:
        event = self.record.budget_toggle
        if event is not None and event.enabled_at is None:
            for attempt in range(5):
                try:
                    drill_budget_set_enabled(budget_id=event.budget_id, enabled=True)
                    return
                except OperationalError as exc:
                    if exc.args[0] != DEADLOCK or attempt == 4:
                        raise

    def done(self) -> bool:
        event = self.record.budget_toggle
        return event is not None and event.enabled_at is not None


class ReconcilerStop(_Fault):
    """The reconciler stopped (SIGTERM to its respawn wrapper: a warm stop, no restart) for
    the phase, then started again."""

    process: Process | None = None

    def tick(self, t: float) -> None:
        event = self.record.reconciler_stop
        if t < self.phase.start or (event is not None and event.restarted_at is not None):
            return
        if event is None:
            self.process = self.stack.named("reconciler")[0]
            self.stack.stop_process(self.process)
            planned = (self.phase.end or self.phase.start) - self.phase.start
            self.record.reconciler_stop = ReconcilerStopEvent(t, self.process.name, planned)
            self.say(f"{t:6.1f}s  reconciler stopped for {planned:.0f} s")
            return
        assert self.process is not None
        if event.exited_after is None and self.process.popen.poll() is not None:
            event.exited_after = t - event.at
        if t >= (self.phase.end or self.phase.start):
            if event.exited_after is None and t - event.at < RECONCILER_EXIT_SECONDS:
                return  # still finishing its pass: the new one must not run beside it
            self.stack.start_procfile("reconciler", label="reconciler_restarted")
            event.restarted_at = t
            event.waiting_at_restart = [
                str(job_id)
                for job_id in LlmJob.objects.filter(id__in=self.record.job_ids)
                .exclude(status__in=LlmJob.FINAL_STATUSES)
                .values_list("id", flat=True)
            ]
            self.say(
                f"{t:6.1f}s  reconciler started again "
                f"({len(event.waiting_at_restart)} jobs not final)"
            )

    def done(self) -> bool:
        event = self.record.reconciler_stop
        return event is not None and event.restarted_at is not None


class KillWaiting(_Fault):
    """A limit a little below the model's last minute of calls (an admin row, as staff set it),
    so that the workers' threads wait on the limiter with jobs they dequeued and have not
    claimed; then kill -9 of the worker holding the most, and the limit removed again."""

    row_id: int | None = None
    since: float | None = None

    def tick(self, t: float) -> None:
        if t < self.phase.start or self.record.kill_waiting is not None:
            return
        if self.row_id is None:
            since = timezone.now() - timedelta(seconds=60)
            used = CostEntry.objects.filter(
                model=KILL_WAITING_MODEL,
                entry_type=CostEntry.EntryType.ATTEMPT,
                created_at__gte=since,
            ).count()
            rpm = max(KILL_WAITING_MIN_RPM, int(used * KILL_WAITING_SHARE))
            row, _ = RateLimit.objects.update_or_create(
                provider=PROVIDER,
                model=KILL_WAITING_MODEL,
                defaults={
                    "rpm": rpm,
                    "enabled": True,
                    "note": "llm_chaos: jobs wait on the limiter",
                },
            )
            self.row_id, self.since = row.id, t
            self.say(
                f"{t:6.1f}s  limit of {rpm} requests a minute on {KILL_WAITING_MODEL} "
                f"({used} calls in the last minute)"
            )
            return
        if not self.look_due(t):
            return
        assert self.since is not None
        best: tuple[Process, int, list[str]] | None = None
        calls_in_flight = self.provider.calls_in_flight()
        trickling = set(self.record.trickle.job_ids) if self.record.trickle else set()
        for process in self.stack.named("worker_llm"):
            pid = process.command_pid()
            if not pid:
                continue
            if trickle_in_flight(self.record, t) and trickling & set(
                events.in_flight_jobs(worker_pid=pid)
            ):
                continue  # its kill would end the trickling call before its deadline does
            held = events.held_before_call(worker_pid=pid, calls_in_flight=calls_in_flight)
            if best is None or len(held) > len(best[2]):
                best = (process, pid, held)
        waited = t - self.since
        enough = best is not None and len(best[2]) >= KILL_WAITING_WANTED
        if best is None or not (enough or waited >= KILL_WAITING_MAX_SECONDS):
            return
        process, _, held = best
        killed = self.stack.kill_command(process)
        if killed is None:
            return
        self.cleanup()
        self.record.kill_waiting = KillEvent(t, process.name, killed, False, held)
        self.say(
            f"{t:6.1f}s  kill -9 {process.name} (pid {killed}) with {len(held)} job(s) waiting "
            "on the limiter; limit removed"
        )

    def cleanup(self) -> None:
        if self.row_id is not None:
            RateLimit.objects.filter(id=self.row_id).delete()
            self.row_id = None

    def done(self) -> bool:
        return self.record.kill_waiting is not None


class Revoke(_Fault):
    """A WebSocket opened with the drill user's API token at the phase's start; once it heard an
    event the token is deleted; the socket must then be closed within REVOKE_CLOSE_SECONDS."""

    socket: SocketWatch | None = None
    _revoked_monotonic = 0.0

    def tick(self, t: float) -> None:
        if t < self.phase.start or self.done():
            return
        event = self.record.revoke
        if event is None:
            event = self.record.revoke = RevokeEvent(opened_at=t)
            try:
                url = self.web_url.replace("http://", "ws://") + "/ws/jobs/"
                self.socket = SocketWatch(url=url, token=drill_token_create(user=self.user))
            except Exception as exc:  # noqa: BLE001 - the check reports it
                event.error = f"the socket did not open: {type(exc).__name__}: {exc}"
                event.revoked_at = t
            return
        socket = self.socket
        assert socket is not None
        now = time.monotonic()
        if event.revoked_at is None:
            heard = socket.heard_between(0.0)
            if not heard and t - event.opened_at < REVOKE_HEAR_SECONDS and socket.is_open:
                return
            event.heard_before = heard
            if not socket.is_open:
                event.close_code = socket.close_code
                event.error = "closed before the revocation" + (
                    f" ({socket.error})" if socket.error else ""
                )
            drill_token_revoke(user=self.user)
            event.revoked_at = t
            self._revoked_monotonic = now
            self.say(f"{t:6.1f}s  token of the open WebSocket deleted ({heard} events heard)")
            return
        if event.error:
            self.cleanup()
            return
        if not socket.is_open:
            assert socket.closed_at is not None
            event.closed_at = event.revoked_at + (socket.closed_at - self._revoked_monotonic)
            event.close_code = socket.close_code
            event.heard_after = socket.heard_between(self._revoked_monotonic + 1.0)
            self.socket = None
            self.say(f"{t:6.1f}s  the revoked socket was closed (code {socket.close_code})")
        elif t - event.revoked_at >= REVOKE_CLOSE_SECONDS:
            event.heard_after = socket.heard_between(self._revoked_monotonic + 1.0)
            self.cleanup()  # closed from our side: closed_at stays None, it outlived its token
            self.say(
                f"{t:6.1f}s  the revoked socket was still open after {REVOKE_CLOSE_SECONDS:g} s"
            )

    def cleanup(self) -> None:
        if self.socket is not None:
            self.socket.stop()
            self.socket = None

    def done(self) -> bool:
        event = self.record.revoke
        if event is None or event.revoked_at is None:
            return False
        return self.socket is None


def trickle_in_flight(record: DrillRecord, t: float) -> bool:
    """Whether a trickling call may still be running short of its deadline (and a little more):
    a kill -9 meanwhile would end it before the deadline could, and prove nothing about it."""
    event = record.trickle
    if event is None:
        return "trickle" in {phase.kind for phase in record.phases}
    return t < event.at + event.deadline_seconds + TRICKLE_CUT_GRACE_SECONDS


def provider_faults_now(faults: list[_Fault], t: float) -> dict[str, Any] | None:
    for fault in faults:
        exclusive = fault.provider_faults(t)
        if exclusive is not None:
            return exclusive
    return None
