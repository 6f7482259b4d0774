"""The mixed drill (``manage.py llm_chaos --mix``): the kinds of work on one stack at once,
with seeded faults and timings (chaos/mix_plan.py), checked from the provider's own log
(chaos/mix_checks.py).

A drill like the classic one (chaos/drill.py: the same processes from the Procfile, the fake
provider, the conductor's storms, kill -9 and FLUSHDB, the same drain), plus:

- the deferred loop, feature policies (deferred with a fallback model; a fallback model), an
  API key with a budget and a key it minted, a tight budget on one feature;
- submissions of every kind in the plan's order, their faults scripted on the fake provider
  per job (its ``Idempotency-Key``) before the job is committed, so no worker calls first;
- cancels of long streams while they stream; agent runs with caps and a tool that hangs;
- kills of the other processes (the agents worker, the deferred loop, the other llm worker)
  and a second FLUSHDB, at the plan's moments.
"""

import json
import math
from contextlib import ExitStack
from dataclasses import replace
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.creation import agent_run_create
from agents.tools import registered_tool
from api.errors import ApplicationError, LimitExceeded, ValidationFailed
from chaos import events
from chaos.agent_tools import HANG_TOOL, TOOL
from chaos.conductor import Conductor
from chaos.drill import AGENT_MODEL, FEATURES, Drill
from chaos.mix_plan import (
    FALLBACK_MODEL,
    HANG_SECONDS,
    MIX_FAULT_KINDS,
    MixJob,
    MixPlan,
    MixRun,
    mix_plan,
)
from chaos.plan import DrillOptions, Knob, Phase, call_deadline_seconds, knobs
from chaos.processes import Process, Stack
from chaos.provider import FakeProvider
from chaos.record import DrillRecord, MixRecord
from chaos.setup import (
    CAPPED_FEATURE,
    drill_budget_remove,
    drill_capped_budget_create,
    drill_key_create,
    drill_policy_restore,
    drill_policy_set,
)
from jobs.models import LlmJob
from jobs.services import job_cancel, job_submit
from ledger.pricing import MICRO_USD, upper_bound_cost
from ledger.selectors import price_for_model

__all__ = ["MIX_FEATURES", "MixDrill", "mix_options"]

MIX_FEATURES = {
    "keyed": "chaos-keyed",
    "capped": CAPPED_FEATURE,
    "deferred": "chaos-deferred",
    "fallback": "chaos-fallback",
    "cancel": "chaos-stream",
    "scripted": "chaos-scripted",
}
"""The feature of each kind of job (``realtime`` jobs take the classic drill's features)."""
RUN_FEATURE = "chaos-agent"
CAP_REASON = "max_cost_exceeded"
"""How a run is refused, or ends, when its next attempt would not fit its max_cost_usd."""
MAX_TOKENS = 128
CANCEL_LOOK_SECONDS = 0.25
"""The running jobs to cancel are looked at this often (one query)."""
MIX_KNOBS = (
    Knob(
        "LLM_DEFERRED_FLUSH_SECONDS",
        "2",
        "60",
        "deferred jobs become a provider batch within seconds",
    ),
    Knob("LLM_DEFERRED_POLL_SECONDS", "1", "10", "the deferred loop passes every second"),
    Knob(
        "LLM_DEFERRED_READ_TIMEOUT_SECONDS",
        "8",
        "60",
        "a batch the killed deferred loop claimed and never confirmed sent is recovered 30 s "
        "later (connect 2 s + read 8 s + 20 s), within the drain, not 90 s later",
    ),
    Knob(
        "LLM_DEFERRED_FALLBACK_MARGIN_SECONDS",
        "0",
        "600",
        "a deferred job moves to real time when its deadline is one real-time run away: the "
        "plan's near deadlines are seconds past that",
    ),
)


class MixDrill(Drill):
    def __init__(self, options: DrillOptions, *, say: Any) -> None:
        super().__init__(options, say=say)
        self.plan: MixPlan = mix_plan(options, options.seed)
        self.stack: Stack | None = None
        self.provider: FakeProvider | None = None
        self.keys: dict[str, int] = {}
        self.to_cancel: dict[str, float] = {}
        self._cancel_looked = float("-inf")
        self._events = list(self.plan.events)
        self._restarts: list[tuple[Process, int, float, int]] = []
        self._runs_started = 0

    # --- the plan ------------------------------------------------------------------------------

    def _timeline(self) -> list[Phase]:
        return self.plan.phases

    def _knobs(self) -> list[Knob]:
        return [*knobs(self.options), *MIX_KNOBS]

    def _environment(self) -> dict[str, str]:
        # The agent runs' tools, whether or not --agent-runs asked for runs.
        env = super()._environment()
        env["LLM_AGENT_TOOL_MODULES"] = "agents.demo_tools,chaos.agent_tools"
        return env

    # --- set-up --------------------------------------------------------------------------------

    def _set_up(self, record: DrillRecord, cleanup: ExitStack) -> None:
        assert self.user is not None
        mix = record.mix = MixRecord(seed=self.plan.seed, plan=self.plan.describe())
        self.say(
            f"mixed drill, seed {self.plan.seed} (replay: --mix --seed {self.plan.seed}): "
            f"{mix.plan}"
        )
        for feature, policy in (
            (MIX_FEATURES["deferred"], {"mode": "deferred", "fallback_models": [FALLBACK_MODEL]}),
            (MIX_FEATURES["fallback"], {"fallback_models": [FALLBACK_MODEL]}),
        ):
            before = drill_policy_set(feature=feature, **policy)  # type: ignore[arg-type]
            cleanup.callback(drill_policy_restore, before=before)
            mix.policies.append(f"{feature}: {json.dumps(policy)}")
        capped = [job for job in self.plan.jobs if job.kind == "capped"]
        if capped:
            # Sized by the ordinary capped jobs: the oversized one (mix_plan.py) is refused.
            ordinary = [job for job in capped if not job.output_tokens] or capped
            limit = self._share(self.plan.capped_share, [self._worst(job) for job in ordinary])
            record.capped_budget_id = drill_capped_budget_create(limit_usd=limit).id
        keyed = [self._worst(job) for job in self.plan.jobs if job.key]
        runs = [self._run_turn_worst() * 2 for run in self.plan.runs if run.key]
        if keyed or runs:
            # Room for the first keyed run's first turn; its later turns may meet the limit.
            limit = max(
                self._share(self.plan.key_share, [*keyed, *runs], floor=keyed or runs),
                max(runs, default=Decimal(0)) * Decimal("0.6"),
            ).quantize(MICRO_USD)
            parent, parent_budget = drill_key_create(
                user=self.user, name="chaos mix", max_budget_usd=limit
            )
            cleanup.callback(drill_budget_remove, budget_id=parent_budget.id)
            child, child_budget = drill_key_create(
                user=self.user,
                name="chaos mix, minted",
                max_budget_usd=parent_budget.limit_usd,
                parent=parent,
            )
            cleanup.callback(drill_budget_remove, budget_id=child_budget.id)
            self.keys = mix.key_ids = {"parent": parent.id, "child": child.id}
            record.more_budget_ids += [parent_budget.id, child_budget.id]

    @staticmethod
    def _share(
        share: float, worst_cases: list[Decimal], *, floor: list[Decimal] | None = None
    ) -> Decimal:
        """A budget that holds ``share`` of these worst cases, and at least two of the largest
        (of ``floor``, if given): some of them are refused, and the window is looked at right
        at its limit."""
        limit = sum(worst_cases, Decimal(0)) * Decimal(str(round(share, 3)))
        return max(limit, 2 * max(floor or worst_cases)).quantize(MICRO_USD)

    def _worst(self, job: MixJob, index: int = 0) -> Decimal:
        price = price_for_model(model=job.model)
        assert price is not None, job.model
        return upper_bound_cost(
            price,
            messages=self._messages(job, index),
            system=None,
            max_tokens=job.output_tokens or MAX_TOKENS,
        )

    def _run_turn_worst(self, hang: bool = True) -> Decimal:
        """One turn's worst case, its first: the later ones carry more transcript."""
        price = price_for_model(model=AGENT_MODEL)
        assert price is not None
        tools = [registered_tool(name).definition() for name in (TOOL, HANG_TOOL)]  # type: ignore[union-attr]
        return upper_bound_cost(
            price,
            messages=self._run_messages(0, hang),
            system=None,
            max_tokens=MAX_TOKENS,
            tools=tools,
        )

    # --- start ---------------------------------------------------------------------------------

    def _start(self, stack: Stack) -> tuple[FakeProvider, str]:
        provider, web_url = super()._start(stack)
        self.stack, self.provider = stack, provider
        stack.start_procfile("deferred")
        provider.settings(**self.plan.provider)
        self.say(f"started: the deferred loop; provider {json.dumps(self.plan.provider)}")
        return provider, web_url

    # --- submissions ---------------------------------------------------------------------------

    @staticmethod
    def _messages(job: MixJob, index: int) -> list[dict[str, Any]]:
        text = f"Chaos mix job {index} ({job.kind}): classify a ticket."
        if job.output_tokens:
            text += f" fake_output_tokens={job.output_tokens}"
        return [{"role": "user", "content": text}]

    def _deferred_run_seconds(self) -> int:
        """What the deferred loop expects a real-time run to take (deferred/flush.py
        ``too_near_for_a_batch``): the RQ timeout of the drill's processes (jobs/timeouts.py)."""
        return max(
            settings.LLM_JOB_TIMEOUT,
            math.ceil(call_deadline_seconds() + settings.LLM_JOB_TIMEOUT_MARGIN),
        )

    def _submit(self, record: DrillRecord, index: int) -> None:
        assert self.user is not None and self.provider is not None and record.mix is not None
        job_plan = self.plan.jobs[index]
        kind = job_plan.kind
        data: dict[str, Any] = {
            "feature": MIX_FEATURES.get(kind) or FEATURES[index % len(FEATURES)],
            "model": job_plan.model,
            "messages": self._messages(job_plan, index),
            "max_tokens": job_plan.output_tokens or MAX_TOKENS,
        }
        if job_plan.deadline_after is not None:
            data["deadline_seconds"] = math.ceil(
                self._deferred_run_seconds() + job_plan.deadline_after
            )
        steps = [*job_plan.script, "ok"] if job_plan.script else []
        try:
            with transaction.atomic():
                job, _ = job_submit(
                    user=self.user, data=data, api_key_id=self.keys.get(job_plan.key)
                )
                if steps:
                    # Before the commit: no worker can take the job before its script is there.
                    self.provider.script(key=str(job.id), steps=steps)
        except LimitExceeded:
            record.refused_at_submit += 1
            record.mix.refused[kind] = record.mix.refused.get(kind, 0) + 1
            return
        record.job_ids.append(str(job.id))
        record.mix.kinds[str(job.id)] = kind
        if job_plan.cancel_after is not None:
            self.to_cancel[str(job.id)] = job_plan.cancel_after

    @staticmethod
    def _run_messages(index: int, hang: bool) -> list[dict[str, Any]]:
        first = [{"name": TOOL, "input": {"n": 1}}]
        first.insert(
            0,
            {"name": HANG_TOOL, "input": {"seconds": HANG_SECONDS}}
            if hang
            else {"name": TOOL, "input": {"n": 0}},
        )
        script = [first, [{"name": TOOL, "input": {"n": 2}}], "done"]
        return [
            {
                "role": "user",
                "content": f"Mix agent run {index}. fake_tool_script={json.dumps(script)}",
            }
        ]

    def _start_agent_run(self, record: DrillRecord, submitted: int) -> None:
        """The plan's runs, one every jobs / runs submissions."""
        runs = self.plan.runs
        if self._runs_started >= len(runs):
            return
        if submitted % max(1, self.options.jobs // len(runs)):
            return
        assert self.user is not None and record.mix is not None
        index = self._runs_started
        self._runs_started += 1
        run_plan: MixRun = runs[index]
        data: dict[str, Any] = {
            "feature": RUN_FEATURE,
            "model": AGENT_MODEL,
            "max_tokens": MAX_TOKENS,
            "tools": [TOOL, HANG_TOOL],
            "messages": self._run_messages(index, run_plan.hang),
        }
        if run_plan.cap_turns is not None:
            cap = self._run_turn_worst(run_plan.hang) * Decimal(str(round(run_plan.cap_turns, 3)))
            data["max_cost_usd"] = str(cap.quantize(MICRO_USD))
        try:
            run, _ = agent_run_create(
                user=self.user, data=data, api_key_id=self.keys.get(run_plan.key)
            )
        except LimitExceeded:  # the key's budget is spent: 429
            record.mix.refused["run"] = record.mix.refused.get("run", 0) + 1
            return
        except ValidationFailed as refused:
            if refused.code != CAP_REASON:
                raise
            # Its cap is below its first turn's worst case: refused at once, as it should be.
            record.mix.refused["run (cap)"] = record.mix.refused.get("run (cap)", 0) + 1
            return
        record.agent_run_ids.append(str(run.id))

    # --- while it runs -------------------------------------------------------------------------

    def _tick(self, record: DrillRecord, t: float) -> None:
        assert record.mix is not None
        self._cancels(record.mix, t)
        self._chaos(record, t)

    def _cancels(self, mix: MixRecord, t: float) -> None:
        """Cancel each long stream once its call has streamed for its planned moment."""
        if not self.to_cancel or t - self._cancel_looked < CANCEL_LOOK_SECONDS:
            return
        self._cancel_looked = t
        now = timezone.now()
        jobs = LlmJob.objects.filter(id__in=list(self.to_cancel)).only(
            "id", "status", "started_at", "attempts", "user_id"
        )
        for job in jobs:
            job_id = str(job.id)
            if job.status in LlmJob.FINAL_STATUSES:
                mix.cancels_missed += 1
                del self.to_cancel[job_id]
                continue
            if job.status != LlmJob.Status.RUNNING or job.started_at is None:
                continue
            into = (now - job.started_at).total_seconds()
            if into < self.to_cancel[job_id]:
                continue
            del self.to_cancel[job_id]
            try:
                cancelled = job_cancel(job=job, running=True)
            except ApplicationError:  # it ended meanwhile
                mix.cancels_missed += 1
                continue
            if cancelled.status == LlmJob.Status.RUNNING:
                mix.cancels_asked[job_id] = into
            else:
                mix.cancels_of_waiting += 1

    def _chaos(self, record: DrillRecord, t: float) -> None:
        """The plan's extra kills and flushes, and whether respawn started the killed again.
        The llm worker's kill and the flush wait for the conductor's flush (its kill may have
        waited for calls in flight): in between, they would start a scheduler of their own."""
        assert self.stack is not None and record.mix is not None
        mix = record.mix
        conductor_flush = any(phase.kind == "flush" for phase in record.phases)
        while self._events and self._events[0].at <= t:
            event = self._events[0]
            after_flush = event.action == "flush" or event.target.startswith("worker_llm")
            if after_flush and conductor_flush and record.flush is None:
                break
            if event.action == "flush":
                keys = events.redis_flush()
                mix.events.append(f"FLUSHDB at {t:.0f} s ({keys} keys)")
            else:
                process = next((p for p in self.stack.processes if p.name == event.target), None)
                if process is None:
                    mix.events.append(f"kill -9 {event.target}: no such process in this drill")
                else:
                    pid = self.stack.kill_command(process)
                    if pid is None:
                        return  # between two runs under its respawn wrapper: next tick
                    self._restarts.append((process, pid, t, len(mix.events)))
                    mix.events.append(f"kill -9 {event.target} (pid {pid}) at {t:.0f} s")
            self.say(f"{t:6.1f}s  {mix.events[-1]}")
            self._events.pop(0)
        for restart in list(self._restarts):
            process, pid, at, line = restart
            now_pid = process.command_pid()
            if now_pid is not None and now_pid != pid:
                mix.events[line] += f", restarted after {t - at:.1f} s"
                self._restarts.remove(restart)

    def _settle(self, record: DrillRecord) -> None:
        """The mix checks money, budgets, caps and tools, not alerts: nothing to wait for."""

    def _drain(self, record: DrillRecord, conductor: Conductor) -> None:
        super()._drain(record, conductor)
        if record.mix is not None and self._restarts:
            for _process, _pid, _at, line in self._restarts:
                record.mix.events[line] += ", NOT restarted"


def mix_options(options: DrillOptions) -> DrillOptions:
    """The classic options as the mix reads them: its faults only among those it draws."""
    return replace(options, faults=options.faults & frozenset(MIX_FAULT_KINDS))
