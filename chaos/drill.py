"""One chaos drill, start to end: refuse or set up, start the system, load it while the
conductor breaks things, wait for every job to end, let the alerts settle, stop everything,
and hand what happened to the checks before taking the drill's set-up away again.

Whatever happens (a check failing, an error, Ctrl-C, SIGTERM), every process started here is
stopped and the alert routes and budget made for the drill are removed.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import TypeVar

import httpx
from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Count
from django.utils import timezone

from agents.creation import agent_run_create
from agents.models import AgentRun, AgentStep
from alerts.dispatch import LOST_DELIVERY_GRACE_SECONDS, UNALERTED_FAILURE_GRACE_SECONDS
from alerts.models import AlertDelivery, AlertFingerprint
from api.errors import LimitExceeded
from chaos import events
from chaos.agent_tools import CHAOS_AGENT_LOG, counted_run_data
from chaos.conductor import Conductor, active_faults
from chaos.plan import DrillOptions, Knob, Phase, knobs, timeline
from chaos.processes import ROOT, Stack, free_port, wait_until
from chaos.provider import FakeProvider
from chaos.receiver import AlertReceiver, routes_install, routes_remove
from chaos.record import DrillRecord
from chaos.safety import Refused, database_url, production_signs, redis_description
from chaos.setup import (
    CAPPED_FEATURE,
    drill_budget_create,
    drill_budget_remove,
    drill_capped_budget_create,
    drill_token_revoke,
    drill_user_ensure,
)
from dlq.models import FailureRecord
from jobs.models import LlmJob
from jobs.services import job_submit
from ledger.services import job_upper_bound_cost

__all__ = ["Drill"]

T = TypeVar("T")

FEATURES = ("chaos-classify", "chaos-summarize", "chaos-extract")
AGENT_FEATURE = "chaos-agent"
AGENT_MODEL = "claude-sonnet-4-6"
MODELS = ("claude-haiku-4-5", "claude-sonnet-4-6")
CAPPED_EVERY = 10
"""Every tenth job has the capped feature (chaos/setup.py)."""
CAPPED_SHARE = 6
"""The capped budget holds the worst case of one in this many of its jobs: at what calls really
cost (about two fifths of their worst case), a third or more of its jobs are refused."""
PROGRESS_SECONDS = 15.0
SETTLE_SECONDS = max(LOST_DELIVERY_GRACE_SECONDS, UNALERTED_FAILURE_GRACE_SECONDS) + 60.0
"""Alerts get this long after the drain, at most: an alert job or delivery the flush lost is put
back by the monitor after two or five minutes (alerts/dispatch.py)."""


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """This process submits thousands of jobs and closes the breaker (which re-enqueues the jobs
    it held, a warning each): their log lines would bury the drill's own. Errors still show; the
    processes started log everything to their files."""
    root = logging.getLogger()
    previous = root.level
    root.setLevel(max(previous, logging.ERROR))
    try:
        yield
    finally:
        root.setLevel(previous)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends a drill like Ctrl-C does: through the cleanup, never around it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Drill:
    def __init__(self, options: DrillOptions, *, say: Callable[[str], None]) -> None:
        self.options, self.say = options, say
        self.user: User | None = None
        self._clock = time.monotonic()
        self._last_progress = -PROGRESS_SECONDS
        self._agent_log = ""

    def run(self, evaluate: Callable[[DrillRecord], T]) -> T:
        """Run the drill; ``evaluate(record)`` runs at its end, before the set-up is removed.
        Raises Refused before touching anything when this does not look like a safe place."""
        signs = production_signs()
        if signs and not self.options.yes_really:
            raise Refused(
                "this looks like a system in use; the drill would FLUSHDB its Redis, fill its "
                "database with jobs and page its on-call:\n  - "
                + "\n  - ".join(signs)
                + "\nPoint DATABASE_URL and REDIS_URL at a scratch database (make chaos does), "
                "or pass --yes-really."
            )
        record = DrillRecord(
            options=self.options,
            phases=self._timeline(),
            knobs=self._knobs(),
            started_at=timezone.now(),
            database=database_url().rsplit("@", 1)[-1],
            redis=redis_description(),
        )
        record.notes += [f"overridden by --yes-really: {sign}" for sign in signs]
        record.open_incidents = events.open_failure_incidents()
        record.earlier_jobs = events.unfinished_jobs()
        if record.earlier_jobs:
            record.notes.append(
                f"{len(record.earlier_jobs)} jobs were not final before the drill; its workers "
                "run them too (their calls are left out of the checks)"
            )
        log_dir = self.options.log_dir or Path(tempfile.mkdtemp(prefix="llm_chaos-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        record.log_dir = str(log_dir)
        # The tool is registered in this process by the import of chaos.agent_tools above.
        self._agent_log = record.agent_tool_log = str(log_dir / "agent-tool-calls.log")
        with _sigterm_as_interrupt(), _quiet_logs(), ExitStack() as cleanup:
            user = self.user = drill_user_ensure()
            record.user_id = user.id
            budget = drill_budget_create(user=user)
            record.budget_id = budget.id
            cleanup.callback(drill_budget_remove, budget_id=budget.id)
            cleanup.callback(self._remove_capped_budget, record)
            cleanup.callback(drill_token_revoke, user=user)
            receiver = AlertReceiver()
            receiver.start()
            cleanup.callback(receiver.stop)
            record.route_ids = routes_install(url=receiver.url)
            cleanup.callback(routes_remove, route_ids=record.route_ids)
            cleanup.callback(self._close_breaker_left_open, record)
            self._set_up(record, cleanup)
            stack = Stack(self._environment(), log_dir)
            cleanup.callback(stack.stop)
            provider, web_url = self._start(stack)
            conductor = Conductor(
                options=self.options,
                record=record,
                stack=stack,
                provider=provider,
                user=user,
                say=self.say,
                web_url=web_url,
            )
            cleanup.callback(conductor.cleanup)
            self._load(record, conductor, stack)
            self._drain(record, conductor)
            self._settle(record)
            record.billing = provider.billing()
            record.provider_stats = provider.stats()
            # Kept beside the processes' logs: what the checks read, for a failure's post-mortem.
            (log_dir / "provider-billing.json").write_text(provider.http.get("/_fake/billing").text)
            (log_dir / "provider-stats.json").write_text(json.dumps(record.provider_stats))
            record.processes_died = stack.died()
            self.say("stopping the drill's processes")
            stack.stop()
            self._forget_dead_workers(stack)
            record.metrics_command = self._metrics_check(stack.env)
            record.received = receiver.snapshot()
            return evaluate(record)
        raise AssertionError("unreachable")  # pragma: no cover - ExitStack does not swallow

    def _forget_dead_workers(self, stack: Stack) -> None:
        pids = {pid for process in stack.processes for pid, _started in process.known}
        forgotten = events.forget_dead_workers(pids=pids)
        if forgotten:
            self.say(f"unregistered {forgotten} rq worker(s) the drill killed with -9")

    @staticmethod
    def _remove_capped_budget(record: DrillRecord) -> None:
        if record.capped_budget_id is not None:
            drill_budget_remove(budget_id=record.capped_budget_id)

    def _close_breaker_left_open(self, record: DrillRecord) -> None:
        """An interrupted drill does not leave the breaker it opened open."""
        event = record.breaker
        if event is not None and event.opened_at is not None and event.closed_at is None:
            assert self.user is not None
            if events.breaker_close_as_staff(user=self.user):
                self.say("closed the breaker the drill had opened")

    # --- what a drill of another mix changes (chaos/mix.py) -------------------------------------

    def _timeline(self) -> list[Phase]:
        return timeline(self.options)

    def _knobs(self) -> list[Knob]:
        return knobs(self.options)

    def _set_up(self, record: DrillRecord, cleanup: ExitStack) -> None:
        """More set-up before the processes start; what it makes, ``cleanup`` takes away."""

    def _tick(self, record: DrillRecord, t: float) -> None:
        """Called with the conductor's tick, through the load and the drain."""

    # --- start ---------------------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
        env.update(
            DATABASE_URL=database_url(),
            REDIS_URL=settings.REDIS_URL,
            PYTHONUNBUFFERED="1",
            LOG_LEVEL="INFO",
        )
        env.update({knob.setting: knob.value for knob in self._knobs()})
        if self.options.agent_runs:
            env["LLM_AGENT_TOOL_MODULES"] = "agents.demo_tools,chaos.agent_tools"
            env[CHAOS_AGENT_LOG] = self._agent_log
        return env

    def _start(self, stack: Stack) -> tuple[FakeProvider, str]:
        options = self.options
        provider = FakeProvider.start(stack, latency_ms=options.latency_ms, seed=options.seed)
        stack.env["ANTHROPIC_BASE_URL"] = provider.url
        for index in range(options.llm_workers):
            stack.start_procfile("worker_llm", label=f"worker_llm_{index}")
        for name in ("worker_default", "worker_agents", "reconciler", "monitor"):
            stack.start_procfile(name)
        web_url = ""
        if options.has("revoke"):
            # The web server of the Procfile, for the WebSocket the drill revokes.
            port = free_port()
            stack.start_procfile("web", port=port)
            web_url = f"http://127.0.0.1:{port}"
            if not wait_until(lambda: httpx.get(f"{web_url}/healthz").is_success, timeout=60):
                raise RuntimeError(f"the web server did not start:\n{stack.log_tails()}")
        started = wait_until(
            lambda: len(events.llm_worker_pids()) >= options.llm_workers, timeout=120, every=0.5
        )
        if not started:
            raise RuntimeError(f"the llm workers did not start:\n{stack.log_tails()}")
        self.say(
            f"started: fake provider {provider.url}, {options.llm_workers} llm workers, "
            "worker_default, worker_agents, reconciler, monitor"
            f"{', web ' + web_url if web_url else ''} "
            f"(logs in {stack.log_dir})"
        )
        return provider, web_url

    # --- load, drain, settle -------------------------------------------------------------------

    def _submit(self, record: DrillRecord, index: int) -> None:
        assert self.user is not None
        capped = self.options.has("budget") and index % CAPPED_EVERY == CAPPED_EVERY - 1
        try:
            job, _ = job_submit(
                user=self.user,
                data={
                    "feature": CAPPED_FEATURE if capped else FEATURES[index % len(FEATURES)],
                    "model": MODELS[index % len(MODELS)],
                    "messages": [
                        {"role": "user", "content": f"Chaos drill job {index}: classify a ticket."}
                    ],
                    "max_tokens": 128,
                },
            )
        except LimitExceeded:
            if not capped:
                raise
            record.refused_at_submit += 1  # its budget is spent: 429 at submit, as it should
            return
        record.job_ids.append(str(job.id))
        if capped and record.capped_budget_id is None:
            # A budget that only some of the capped jobs fit in: the rest are refused, and
            # its window is looked at right at its limit.
            capped_jobs = max(1, self.options.jobs // CAPPED_EVERY)
            limit = job_upper_bound_cost(job=job) * max(2, capped_jobs // CAPPED_SHARE)
            if limit > 0:
                record.capped_budget_id = drill_capped_budget_create(limit_usd=limit).id

    def _start_agent_run(self, record: DrillRecord, submitted: int) -> None:
        """One agent run every jobs / agent_runs jobs: three turns, the first with two calls of
        the counted tool at once, the second with one, then the answer."""
        runs = self.options.agent_runs
        if not runs or len(record.agent_run_ids) >= runs:
            return
        if submitted % max(1, self.options.jobs // runs):
            return
        assert self.user is not None
        index = len(record.agent_run_ids)
        assert AGENT_MODEL in MODELS
        # Not the model the kill-waiting fault limits: the runs leave that scenario alone.
        data = counted_run_data(feature=AGENT_FEATURE, model=AGENT_MODEL, index=index)
        run, _ = agent_run_create(user=self.user, data=data)
        record.agent_run_ids.append(str(run.id))

    def _load(self, record: DrillRecord, conductor: Conductor, stack: Stack) -> None:
        options = self.options
        self.say(
            f"load: {options.jobs} jobs over {options.duration:g} s; faults: "
            + (", ".join(p.describe() for p in record.phases) or "none")
        )
        started = time.monotonic()
        self._clock = started
        submitted, next_watch = 0, 0.0
        while True:
            t = time.monotonic() - started
            due = min(options.jobs, int(t / options.duration * options.jobs) + 1)
            while submitted < due:
                self._submit(record, submitted)
                submitted += 1
                self._start_agent_run(record, submitted)
            conductor.tick(t)
            self._tick(record, t)
            if t >= next_watch:
                next_watch = t + 2.0
                stack.watch()
                self._sample(record, t)
            if t >= options.duration and submitted == options.jobs and conductor.done(t):
                break
            time.sleep(0.05)
        record.load_seconds = time.monotonic() - started

    def _sample(self, record: DrillRecord, t: float) -> None:
        """Negative values are looked for all along, not only at the end; progress too."""
        self._look_at_budgets(record)
        if int(t / 2) % 3 == 0:
            record.negative_samples += 1
            record.negatives_seen += events.negative_values(
                job_ids=record.job_ids, budget_id=record.budget_id
            )
        if t - self._last_progress >= PROGRESS_SECONDS:
            self._last_progress = t
            counts = dict(
                LlmJob.objects.filter(id__in=record.job_ids)
                .values_list("status")
                .annotate(n=Count("id"))
                .values_list("status", "n")
            )
            shown = " ".join(f"{status} {n}" for status, n in sorted(counts.items()))
            faults = ",".join(active_faults(record.phases, t)) or "-"
            self.say(f"{t:6.1f}s  jobs {len(record.job_ids)}: {shown}  (faults: {faults})")

    @staticmethod
    def _look_at_budgets(record: DrillRecord) -> None:
        """Every budget of the drill's, every two seconds: no window may be above its limit."""
        above, now = events.budget_windows_above_limit(budget_ids=record.budget_ids())
        looks = record.budget_looks
        looks.looks += 1
        looks.above += above
        for budget_id, (spent, limit) in now.items():
            highest = looks.highest.get(budget_id)
            if highest is None or Decimal(spent) > Decimal(highest[0]):
                looks.highest[budget_id] = (spent, limit)

    def _drain(self, record: DrillRecord, conductor: Conductor) -> None:
        started = time.monotonic()
        deadline = started + self.options.drain_timeout
        while time.monotonic() < deadline:
            t = time.monotonic() - self._clock
            conductor.tick(t)
            self._tick(record, t)
            self._sample(record, t)
            left = LlmJob.objects.filter(id__in=record.job_ids).exclude(
                status__in=LlmJob.FINAL_STATUSES
            )
            runs_left = AgentRun.objects.filter(
                id__in=record.agent_run_ids, status__in=AgentRun.ACTIVE_STATUSES
            )
            if not left.exists() and not runs_left.exists():
                break
            time.sleep(1.0)
        if record.agent_run_ids:
            # Their turns are jobs of the drill: every job check covers them from here on.
            turn_jobs = AgentStep.objects.filter(
                run_id__in=record.agent_run_ids, job__isnull=False
            ).values_list("job_id", flat=True)
            record.agent_job_ids = [str(job_id) for job_id in turn_jobs]
            record.job_ids += record.agent_job_ids
        record.drain_seconds = time.monotonic() - started
        self.say(f"drain: {record.drain_seconds:.0f} s after the load")

    def _settle(self, record: DrillRecord) -> None:
        """Until every failure of the drill is alerted, every delivery made and every condition
        that fired (a queue's wait, an overdue retry) resolved again, or SETTLE_SECONDS."""

        def settled() -> bool:
            unalerted = FailureRecord.objects.filter(
                job_id__in=record.job_ids, alerted_at=None, state=FailureRecord.State.OPEN
            )
            pending = AlertDelivery.objects.filter(
                state=AlertDelivery.State.PENDING, created_at__gte=record.started_at
            )
            firing = AlertFingerprint.objects.filter(active=True).exclude(
                fingerprint__startswith="failure:"
            )
            return not (unalerted.exists() or pending.exists() or firing.exists())

        started = time.monotonic()
        wait_until(settled, timeout=SETTLE_SECONDS, every=1.0)
        self.say(f"alerts settled after {time.monotonic() - started:.0f} s")

    def _metrics_check(self, env: dict[str, str]) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "manage.py", "llm_metrics", "--check"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        return done.returncode, (done.stdout + done.stderr).strip()
