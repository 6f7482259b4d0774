"""The faults of a drill, moment by moment: ``tick(t)`` is called many times a second by the
drill's loop and does whatever is due at ``t`` seconds, without ever blocking for long:

- the fake provider's configuration: the 429, 529 and drop windows, the 401s, the long calls
  (held until enough calls arrived while the provider answered slowly, whatever the machine's
  speed; no other provider fault meanwhile, nor until they ended);
- 401s on every call, as with a revoked key, until the breaker has been open a few seconds:
  then the key is "fixed" (the 401s stop) and the breaker closed through ``breaker_close``, as
  staff do with the admin action;
- kill -9 of the llm worker that runs the rq scheduler, once it has calls in flight, then
  watching runtime.respawn start it again;
- FLUSHDB, noting who held the scheduler lock and which jobs were waiting;
- the faults of chaos/faults.py: trickle, budget, reconciler, kill-waiting, revoke.
"""

import os
from collections.abc import Callable

from django.contrib.auth.models import User

from chaos import events
from chaos.faults import (
    BudgetToggle,
    KillWaiting,
    ReconcilerStop,
    Revoke,
    Trickle,
    provider_faults_now,
    trickle_in_flight,
)
from chaos.plan import (
    LONG_CALL_MAX_WAIT_SECONDS,
    LONG_CALL_SECONDS,
    LONG_CALL_WINDOW_SECONDS,
    LONG_CALLS_WANTED,
    STALE_AFTER_SECONDS,
    DrillOptions,
    Phase,
    breaker_hold_seconds,
)
from chaos.processes import Process, Stack, descendants, is_zombie
from chaos.provider import FakeProvider
from chaos.record import BreakerEvent, DrillRecord, FlushEvent, KillEvent, LongCallEvent

__all__ = ["STORM_MAX_EXTRA_SECONDS", "Conductor"]

FAULT_401_MAX_SECONDS = 5.0
"""The 401s stop after this if the breaker has not opened by then (the check then says so)."""
KILL_WAIT_SECONDS = 20.0
"""The kill waits this long, at most, for its worker to have KILL_IN_FLIGHT jobs in flight."""
KILL_IN_FLIGHT = 2
"""Jobs the killed worker should be running: a kill with nothing in flight proves nothing, and
one call may end in the instant between the look and the kill."""
KILL_LATENCY_MS = "2000-3000"
"""The provider's latency while the kill waits: calls stay in flight long enough to be caught."""
STORM_MAX_EXTRA_SECONDS = 10.0
"""A storm (429, 529, dropped connections) whose windows passed before the provider served
that fault once stays on until it has, this long at most (the check then says it did not
happen): a window of clock time can see no call (a worker killed, a flush, a loaded machine),
and with a share below 1 the calls in it can all draw no fault."""
STORM_LOOK_SECONDS = 0.25
"""How often an extended storm asks the provider what it served."""
LONG_QUIET_SECONDS = LONG_CALL_SECONDS + 3.0
"""After the long-call window, no other provider fault for this long: a fault is drawn when a
call ends, and a long call must end as an answer."""
_NEW_FAULTS = {
    "trickle": Trickle,
    "budget": BudgetToggle,
    "reconciler": ReconcilerStop,
    "kill-waiting": KillWaiting,
    "revoke": Revoke,
}


def _alive(pid: int) -> bool:
    """Whether the process runs: a process killed a moment ago is a zombie until it is reaped
    (its parent killed with it, by init), and ``kill(pid, 0)`` still finds a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not is_zombie(pid)


class Conductor:
    def __init__(
        self,
        *,
        options: DrillOptions,
        record: DrillRecord,
        stack: Stack,
        provider: FakeProvider,
        user: User,
        say: Callable[[str], None],
        web_url: str = "",
    ) -> None:
        self.options, self.record, self.stack = options, record, stack
        self.provider, self.user, self.say = provider, user, say
        self.phases = {phase.kind: phase for phase in record.phases}
        self.faults = [
            fault(
                phase=self.phases[kind],
                options=options,
                record=record,
                stack=stack,
                provider=provider,
                user=user,
                say=say,
                web_url=web_url,
            )
            for kind, fault in _NEW_FAULTS.items()
            if kind in self.phases
        ]
        self.long_requests_before: int | None = None
        self.long_looked = float("-inf")
        self.long_enough_at: float | None = None
        self.fault_401 = False
        self.breaker_was_open = False
        self.kill_target: Process | None = None
        self.kill_worker_pid: int | None = None
        self.kill_waiting_since: float | None = None
        self.storm_looked: dict[str, tuple[float, bool]] = {}
        """kind -> (when the provider was last asked, whether it had served that fault)."""
        self.storm_extended: set[str] = set()

    # --- the provider's configuration ------------------------------------------------------

    def _provider_config(self, t: float) -> tuple[dict[str, float], str]:
        faults: dict[str, float] = {}
        if self.fault_401:
            faults["401"] = 1.0
        for kind, rate in (
            ("529", 1.0),
            ("429", self.options.rate_429),
            ("drop", self.options.drop_rate),
        ):
            if self._storm_on(kind, t):
                faults[kind] = rate
        exclusive = provider_faults_now(self.faults, t)
        if exclusive is not None:
            faults = exclusive
        latency = self.options.latency_ms
        if self.kill_waiting_since is not None and self.record.kill is None:
            latency = KILL_LATENCY_MS
        if self._long_calls(t):
            latency = f"{LONG_CALL_SECONDS * 1000:.0f}"
        event = self.record.long_call
        if event is not None and (
            event.closed_at is None or t < event.closed_at + LONG_QUIET_SECONDS
        ):
            faults = {}
        return faults, latency

    def _kills_done(self) -> bool:
        return ("kill" not in self.phases or self.record.kill is not None) and (
            "kill-waiting" not in self.phases or self.record.kill_waiting is not None
        )

    def _storm_on(self, kind: str, t: float) -> bool:
        """Within one of the kind's windows (the mixed drill's storms may have several,
        chaos/mix_plan.py), or after the last while the provider has not served it yet
        (STORM_MAX_EXTRA_SECONDS at most)."""
        phases = [phase for phase in self.record.phases if phase.kind == kind]
        if any(phase.active(t) for phase in phases):
            return True
        ends = [phase.end for phase in phases if phase.end is not None and phase.end <= t]
        if not ends or len(ends) < len(phases) or t - max(ends) > STORM_MAX_EXTRA_SECONDS:
            return False
        looked_at, served = self.storm_looked.get(kind, (float("-inf"), False))
        if not served and t - looked_at >= STORM_LOOK_SECONDS:
            stats = self.provider.stats()
            count = stats.get("dropped", 0) if kind == "drop" else stats["by_status"].get(kind, 0)
            served = int(count) > 0
            self.storm_looked[kind] = (t, served)
            if not served and kind not in self.storm_extended:
                self.storm_extended.add(kind)
                self.say(f"{t:6.1f}s  {kind}: none served in its window yet, kept on until one is")
            elif served and kind in self.storm_extended:
                self.say(f"{t:6.1f}s  {kind}: served, the storm ends")
        return not served

    def _long_calls(self, t: float) -> bool:
        """Whether the provider answers slowly now: from the phase's start (once the 401s are
        over) until LONG_CALLS_WANTED calls arrived meanwhile and the window has lasted
        LONG_CALL_WINDOW_SECONDS, or LONG_CALL_MAX_WAIT_SECONDS passed. Counted by the provider
        (its ``requests``), not by the clock: on a slow or busy machine the drill's loop can
        tick less often than the window lasts, and a window of clock time alone saw no call."""
        phase = self.phases.get("long")
        if phase is None or t < phase.start or self.fault_401:
            return False
        if self.record.long_call is None and not self._kills_done():
            return False  # a kill while long calls run would end them: nothing learned
        event = self.record.long_call
        if event is None:
            self.long_requests_before = int(self.provider.stats()["requests"])
            self.record.long_call = LongCallEvent(t, LONG_CALL_SECONDS, STALE_AFTER_SECONDS)
            self.say(
                f"{t:6.1f}s  long calls: {LONG_CALL_SECONDS:g} s each until {LONG_CALLS_WANTED} "
                f"calls arrived (at least {LONG_CALL_WINDOW_SECONDS:g} s)"
            )
            return True
        if event.closed_at is not None:
            return False
        if t - self.long_looked >= 0.25:
            self.long_looked = t
            assert self.long_requests_before is not None
            arrivals = int(self.provider.stats()["requests"]) - self.long_requests_before
            event.arrivals = arrivals
            lasted = t - event.at
            if arrivals >= LONG_CALLS_WANTED and lasted >= LONG_CALL_WINDOW_SECONDS:
                self.long_enough_at = self.long_enough_at or t
            # Half a second more once enough arrived: the last of them may not have drawn its
            # latency yet (the provider counts a call before it reads its body).
            enough = self.long_enough_at is not None and t - self.long_enough_at >= 0.5
            if enough or lasted >= LONG_CALL_MAX_WAIT_SECONDS:
                event.closed_at = t
                self.say(f"{t:6.1f}s  long calls: {arrivals} arrived, window closed")
                return False
        return True

    def tick(self, t: float) -> None:
        self._breaker(t)
        self._kill(t)
        self._flush(t)
        for fault in self.faults:
            fault.tick(t)
        self._configure_provider(t)

    def cleanup(self) -> None:
        """What an interrupted drill must not leave behind (a disabled budget, a rate limit)."""
        for fault in self.faults:
            fault.cleanup()

    def _configure_provider(self, t: float) -> None:
        faults, latency = self._provider_config(t)
        self.provider.configure(faults=faults, latency_ms=latency)

    def done(self, t: float) -> bool:
        """Every event of the plan has happened (or given up)."""
        pending = [
            kind
            for kind, event in (
                ("401", self.record.breaker),
                ("kill", self.record.kill),
                ("flush", self.record.flush),
                ("long", self.record.long_call),
            )
            if kind in self.phases and event is None
        ]
        pending += [type(fault).__name__ for fault in self.faults if not fault.done()]
        pending += [kind for kind in self.storm_extended if self._storm_on(kind, t)]
        long_call = self.record.long_call
        if long_call is not None and long_call.closed_at is None:
            pending.append("long")
        breaker = self.record.breaker
        return (
            not pending
            and not self.fault_401
            and not (breaker is not None and self.breaker_was_open)
        )

    # --- 401s and the circuit breaker ----------------------------------------------------------

    def _breaker(self, t: float) -> None:
        phase = self.phases.get("401")
        if phase is None:
            return
        event = self.record.breaker
        if event is None:
            if t < phase.start:
                return
            event = self.record.breaker = BreakerEvent(fault_at=t)
            self.fault_401 = True
            self.say(f"{t:6.1f}s  401s on every call until the circuit breaker opens")
        breaker = events.breaker_now()
        is_open = breaker is not None and breaker.is_open
        if is_open and not self.breaker_was_open:
            assert breaker is not None
            self.breaker_was_open = True
            event.openings += 1
            if event.opened_at is None:
                event.opened_at, event.reason = t, breaker.reason_code
            self.say(f"{t:6.1f}s  breaker OPEN ({breaker.reason_code})")
        elif not is_open and self.breaker_was_open:
            self.breaker_was_open = False
            if event.closed_at is None:  # closed by someone else: a probe, staff
                event.closed_at = t
                event.closed_by = str(breaker.close_reason if breaker else "")
        never_opened = event.opened_at is None and t > event.fault_at + FAULT_401_MAX_SECONDS
        if self.fault_401 and never_opened:
            self.fault_401 = False
            self.say(f"{t:6.1f}s  401s stopped: the breaker did not open")
        hold = breaker_hold_seconds(self.options)
        if is_open and event.opened_at is not None and t >= event.opened_at + hold:
            # The key is fixed first, then staff close the breaker: closing enqueues every held
            # job at once (and takes a while), and none of them may meet a 401 still in place.
            self.fault_401 = False
            self._configure_provider(t)
            if event.closed_at is None and events.breaker_close_as_staff(user=self.user):
                event.closed_at, event.closed_by_drill = t, True
                event.closed_by = self.user.get_username()
                self.breaker_was_open = False
                self.say(f"{t:6.1f}s  breaker closed by the drill (breaker_close, as the admin)")

    # --- kill -9 -------------------------------------------------------------------------------

    def _kill_target(self) -> tuple[Process, int, bool]:
        """The llm worker whose process tree holds the rq scheduler, else the first."""
        _, scheduler_pid = events.scheduler_holder_pid()
        workers = self.stack.named("worker_llm")
        for process in workers:
            pid = process.command_pid()
            if pid and scheduler_pid and scheduler_pid in (pid, *descendants(pid)):
                return process, pid, True
        process = workers[0]
        return process, process.command_pid() or 0, False

    def _kill(self, t: float) -> None:
        phase = self.phases.get("kill")
        if phase is None or t < phase.start:
            return
        event = self.record.kill
        if event is None and trickle_in_flight(self.record, t):
            return  # a kill would end the trickling call before its deadline does
        if event is None:
            if self.kill_waiting_since is None:
                self.kill_waiting_since = t
            process, worker_pid, held = self._kill_target()
            in_flight = events.in_flight_jobs(worker_pid=worker_pid) if worker_pid else []
            waited = t - self.kill_waiting_since
            if len(in_flight) < KILL_IN_FLIGHT and waited < KILL_WAIT_SECONDS:
                return  # wait for the worker to have calls in flight
            killed = self.stack.kill_command(process)
            if killed is None:
                return
            self.record.kill = KillEvent(t, process.name, killed, held, in_flight)
            self.kill_target = process
            self.say(
                f"{t:6.1f}s  kill -9 {process.name} (pid {killed}"
                f"{', the rq scheduler' if held else ''}) with {len(in_flight)} call(s) in flight"
            )
            return
        if event.restarted_after is None and self.kill_target is not None:
            pid = self.kill_target.command_pid()
            if pid is not None and pid != event.pid:
                event.restarted_after = t - event.at
                self.say(f"{t:6.1f}s  {event.process} restarted by respawn (pid {pid})")

    # --- FLUSHDB -------------------------------------------------------------------------------

    def _flush(self, t: float) -> None:
        phase = self.phases.get("flush")
        if phase is None or t < phase.start or self.record.flush is not None:
            return
        kill = self.phases.get("kill")
        if kill is not None and (
            self.record.kill is None or t < self.record.kill.at + phase.start - kill.start
        ):
            # The flush comes while the killed worker's scheduler is gone, as long after the
            # kill as planned (the kill may wait): a process just killed may not be reaped yet.
            return
        name, pid = events.scheduler_holder_pid()
        if not name:
            holder, running = "no scheduler held the llm queue's lock", False
        elif pid is None or not _alive(pid):
            holder = f"the lock was held by a dead scheduler (pid {pid or '?'})"
            running = False
        else:
            holder, running = f"a live scheduler held the lock (pid {pid})", True
        waiting = events.waiting_jobs(job_ids=self.record.job_ids)
        keys = events.redis_flush()
        self.record.flush = FlushEvent(t, keys, holder, running, waiting)
        self.say(f"{t:6.1f}s  FLUSHDB ({keys} keys, {len(waiting)} jobs waiting; {holder})")


def active_faults(phases: list[Phase], t: float) -> list[str]:
    return [phase.kind for phase in phases if phase.end is not None and phase.active(t)]
