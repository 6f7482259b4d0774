"""A worker host killed under a mixed load: real-time jobs, long streams, a batch and agent runs
with a counted tool, on the llm and agents workers of w1 and w2 (the loops on w3), every process
on w1 killed at once while its calls and tool steps are in flight.

Checked as the kill scenario is (every job completed, none stuck two minutes, the jobs w1 had in
flight sent again within two minutes, the ledger against the provider's bill per model and job
by job), plus what a mixed load adds: every agent run completed, no tool call recorded as
completed started again (the tool's own log, chaos/agent_tools.py), and the drill's budget: no
window above its limit at any look (one a second) and its window equal to the ledger at the end,
no reservation left open.
"""

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from django.contrib.auth.models import User

from agents.creation import agent_run_create
from agents.models import AgentRun, AgentStep
from batches.services import batch_submit
from chaos import events
from chaos.agent_checks import agent_checks
from chaos.agent_tools import CHAOS_AGENT_LOG, counted_run_data
from chaos.budget_checks import budget_checks
from chaos.checks import Check
from chaos.cluster.checks import scenario_checks
from chaos.cluster.scenarios import (
    MODELS,
    ScenarioRecord,
    _collect,
    _submit,
    _submit_stream,
    _watch,
)
from chaos.cluster.services import Cluster
from chaos.plan import DrillOptions
from chaos.processes import wait_until
from chaos.provider import FakeProvider
from chaos.record import BudgetLook, DrillRecord
from jobs.models import LlmJob

__all__ = ["MixedScenario", "mixed_checks", "mixed_kill_scenario"]

LATENCY_MS = "800-2500"
JOBS = 16
STREAMS = 4
STREAM_TOKENS = 1500
TOKENS_PER_SECOND = 300
"""Five-second streams: most are still streaming at the kill."""
BATCH_ITEMS = 6
RUNS = 4
AGENT_MODEL = "claude-sonnet-4-6"
IN_FLIGHT = 8
"""The kill comes once this many calls are in flight on the two hosts (or after 30 s)."""
SETTLE_SECONDS = 180.0
"""After the kill: two minutes of the promise for the jobs, and the runs' later turns."""
TOOL_MODULES = "agents.demo_tools,chaos.agent_tools"


@dataclass
class MixedScenario:
    record: ScenarioRecord
    run_ids: list[str] = field(default_factory=list)
    batch_jobs: list[str] = field(default_factory=list)
    tool_log: str = ""
    budget_id: int | None = None
    looks: BudgetLook = field(default_factory=BudgetLook)


def _run(user: User, index: int) -> str:
    data = counted_run_data(feature="cluster-mixed-agent", model=AGENT_MODEL, index=index)
    run, _ = agent_run_create(user=user, data=data)
    return str(run.id)


def _batch(user: User) -> list[str]:
    batch, _ = batch_submit(
        user=user,
        data={
            "feature": "cluster-mixed-batch",
            "model": "claude-haiku-4-5",
            "items": [
                {"messages": [{"role": "user", "content": f"Batch item {i}."}], "max_tokens": 128}
                for i in range(BATCH_ITEMS)
            ],
        },
    )
    return [
        str(job_id)
        for job_id in LlmJob.objects.filter(batch_items__batch=batch).values_list("id", flat=True)
    ]


def _turn_jobs(run_ids: list[str]) -> list[str]:
    return [
        str(job_id)
        for job_id in AgentStep.objects.filter(run_id__in=run_ids, job__isnull=False).values_list(
            "job_id", flat=True
        )
    ]


def mixed_kill_scenario(
    cluster: Cluster, provider: FakeProvider, user: User, *, budget_id: int,
    earlier_jobs: set[str], say: Callable[[str], None],
) -> MixedScenario:  # fmt: skip
    victim, other = cluster.topology["w1"], cluster.topology["w2"]
    record = ScenarioRecord(
        name="kill-host-mixed",
        description=f"a mixed load ({JOBS} real-time jobs, {STREAMS} streams of "
        f"{STREAM_TOKENS} tokens, a batch of {BATCH_ITEMS}, {RUNS} agent runs of three tool "
        f"calls) on the llm and agents workers of {victim.name} and {other.name}, every process "
        f"on {victim.name} killed at once with calls and tool steps in flight",
        victim=victim.name,
        started=time.time(),
        earlier_jobs=earlier_jobs,
    )
    scenario = MixedScenario(record=record, budget_id=budget_id)
    scenario.tool_log = str(cluster.stack.log_dir / "kill-host-mixed-tools.log")
    Path(scenario.tool_log).write_text("")
    provider.http.post("/_fake/reset").raise_for_status()
    provider.configure(faults={}, latency_ms=LATENCY_MS)
    provider.settings(stream_tokens_per_second=TOKENS_PER_SECOND)
    env = {"LLM_AGENT_TOOL_MODULES": TOOL_MODULES, CHAOS_AGENT_LOG: scenario.tool_log}
    for host in (victim, other):
        cluster.start_worker(host, env=env)
        cluster.start_agents_worker(host, env=env)
    if not wait_until(
        lambda: cluster.worker_registered(victim) and cluster.worker_registered(other),
        timeout=90,
        every=0.5,
    ):
        raise RuntimeError(f"the llm workers on {victim.name} and {other.name} did not start")
    jobs = [_submit(user, i, "mixed") for i in range(JOBS)]
    jobs += [
        _submit_stream(
            user, i, feature="cluster-mixed-stream", model=MODELS[i % 2], tokens=STREAM_TOKENS
        )
        for i in range(STREAMS)
    ]
    scenario.batch_jobs = _batch(user)
    scenario.run_ids = [_run(user, i) for i in range(RUNS)]
    record.other_jobs = jobs + scenario.batch_jobs

    def look(_now: float) -> None:
        above, highest = events.budget_windows_above_limit(budget_ids=[budget_id])
        scenario.looks.looks += 1
        scenario.looks.above += above
        scenario.looks.highest.update(highest)

    wait_until(lambda: len(provider.calls_in_flight()) >= IN_FLIGHT, timeout=30, every=0.2)
    # Before the kill: its streams end at the provider within ms of it.
    record.fault_at = time.time()
    record.killed_pids = cluster.kill_host(victim)
    say(f"{record.name}: killed {len(record.killed_pids)} processes on {victim.name}")
    deadline = time.time() + SETTLE_SECONDS
    while time.time() < deadline:
        runs_done = not AgentRun.objects.filter(
            id__in=scenario.run_ids, status__in=AgentRun.ACTIVE_STATUSES
        ).exists()
        record.other_jobs = jobs + scenario.batch_jobs + _turn_jobs(scenario.run_ids)
        _watch(record, min(deadline, time.time() + 5), tick=look)
        if runs_done and len(record.final_at) == len(record.job_ids):
            break
    record.other_jobs = jobs + scenario.batch_jobs + _turn_jobs(scenario.run_ids)
    cluster.stop_agents_worker(other)
    cluster.stop_worker(other)
    _collect(cluster, provider, record)
    # The jobs whose calls were in flight on the victim at the kill: each must be sent again
    # within two minutes (the kill scenario's check reads them as ``long_jobs``).
    at_kill = [call for call in record.calls if call.arrived < record.fault_at <= call.ended]
    hosts = Counter(call.host for call in at_kill)
    record.notes.append(
        "calls in flight at the kill: "
        + (", ".join(f"{name} {n}" for name, n in sorted(hosts.items())) or "none")
    )
    killed = {call.job_id for call in at_kill if call.host == victim.name}
    record.long_jobs = [job for job in record.job_ids if job in killed]
    record.other_jobs = [job for job in record.other_jobs if job not in killed]
    return scenario


def mixed_checks(scenario: MixedScenario) -> list[Check]:
    record = scenario.record
    drill = DrillRecord(
        options=DrillOptions(faults=frozenset()),  # the budget is looked at, not toggled
        phases=[],
        knobs=[],
        started_at=datetime.fromtimestamp(record.started, UTC),
        database="",
        redis="",
        budget_id=scenario.budget_id,
        earlier_jobs=set(record.earlier_jobs),
        job_ids=list(record.job_ids),
        agent_run_ids=list(scenario.run_ids),
        agent_tool_log=scenario.tool_log,
        budget_looks=scenario.looks,
    )
    # Without a call of the load in flight on the victim at the kill, "ran again within two
    # minutes" would pass on nothing (an earlier run's jobs can take the workers first).
    hit = Check(
        "the kill cut calls of the load off on the host",
        bool(record.long_jobs),
        f"{len(record.long_jobs)} of the load's calls in flight on {record.victim} at the kill",
    )
    return [hit, *scenario_checks(record), *agent_checks(drill), *budget_checks(drill)]
