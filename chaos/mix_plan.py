"""The mixed drill's plan (``llm_chaos --mix``), drawn from one seed: which kind of work each
submission is, with what model, key, deadline, script or cancel; the agent runs and their caps;
the faults' windows and moments; the fake provider's pace and batch behaviour; the budgets'
limits. The same seed gives the same plan (``--seed N`` replays a run's plan; the machine's
timing still varies).

The kinds of work, mixed on one stack:

- ``realtime``: a plain job, on a feature of the drill's;
- ``keyed``: submitted with the drill's API key, or with the key that key minted (a child spends
  against its parent's budget too): the key budget is small enough that some are refused;
- ``capped``: on the feature whose budget holds only a part of its jobs' worst cases;
- ``deferred``: on a feature whose policy is ``deferred`` (provider message batches at the batch
  price), some with a deadline that the batch's own time passes, so that they move to real time
  and meet 529s there (the policy has a fallback model) while their batch result still comes;
- ``fallback``: on a feature with a fallback model, its first calls scripted to answer 529;
- ``cancel``: a long streamed answer, cancelled while it streams;
- ``scripted``: its first calls cut mid-answer (billed, their outcome unknown to us) or answered
  429, then answered.

Agent runs go along (``--agent-runs``), some with a ``max_cost_usd`` that one or two turns fit
in, some calling a tool that hangs past its timeout before its side effect.
"""

import random
from dataclasses import dataclass, field, replace
from typing import Any

from chaos.plan import DrillOptions, Phase

__all__ = [
    "FALLBACK_MODEL",
    "MIX_FAULT_KINDS",
    "MIX_KINDS",
    "MIX_MIN_DURATION",
    "MixEvent",
    "MixJob",
    "MixPlan",
    "MixRun",
    "mix_plan",
]

MIX_KINDS: dict[str, int] = {
    "realtime": 24,
    "keyed": 14,
    "capped": 10,
    "deferred": 18,
    "fallback": 12,
    "cancel": 14,
    "scripted": 8,
}
"""Each submission's kind, drawn with these weights."""
MODELS = ("claude-haiku-4-5", "claude-sonnet-4-6")
"""The jobs' models (the classic drill's)."""
FALLBACK_MODEL = "claude-opus-4-6"
"""The fallback of the deferred and fallback features: dearer than either of the jobs' models,
so that a booking at the wrong model shows in money as well as in tokens."""
MIX_FAULT_KINDS = ("429", "529", "drop", "kill", "flush")
"""The classic drill's faults the mix draws (chaos/plan.py), each with a seeded moment; "kill"
and "flush" also bring kills of the other processes and a second flush (``MixEvent``)."""
MIX_MIN_DURATION = 20.0
"""Below this the seeded windows are shorter than a retry."""
LONG_STREAM_TOKENS = (800, 2000)
"""A cancelled job's answer, in output tokens: seconds of stream at the plan's pace."""
STREAM_TOKENS_PER_SECOND = (200.0, 1000.0)
"""The fake provider's pace for every streamed answer, drawn in this range (a slow model's to
a fast self-hosted one's): an ordinary answer (tens of tokens) streams in a fraction of a
second, a long one for seconds, long enough to be cancelled while it streams."""
SCRIPTS = (("drop",), ("429",), ("drop", "429"), ("429", "drop"), ("drop", "drop"))
"""The ``scripted`` kind's first answers: whatever the storms' dice, calls are cut and 429s met."""
HANG_SECONDS = 5.0
"""How long the hanging tool sleeps before its side effect: past its 2 s timeout."""


OVERSIZED_TOKENS = 4096
"""The max_tokens of the capped job the capped budget cannot take (its limit holds a couple of
the others' 128-token worst cases)."""


@dataclass(frozen=True)
class MixJob:
    kind: str
    model: str
    key: str = ""
    """"parent", "child" or "" (the drill's user, no key)."""
    deadline_after: float | None = None
    """deferred: seconds by which the deadline is later than the deferred loop's last moment to
    move it to real time (small: the batch's own time passes it)."""
    script: tuple[str, ...] = ()
    """The answers of its first real-time calls (fake_provider/scripts.py), then "ok": 529s
    (fallback, deferred), cuts and 429s (scripted)."""
    cancel_after: float | None = None
    """cancel: seconds after its call started."""
    output_tokens: int = 0
    """cancel: the answer asked for (max_tokens too)."""


@dataclass(frozen=True)
class MixRun:
    cap_turns: float | None
    """``max_cost_usd`` as a multiple of one turn's worst case (None: no cap)."""
    hang: bool
    """Its first turn calls the hanging tool too."""
    key: str = ""


@dataclass(frozen=True)
class MixEvent:
    at: float
    """Seconds from the drill's start."""
    action: str
    """"kill" (kill -9 of the command under the process's respawn wrapper) or "flush"."""
    target: str = ""
    """kill: the name of the drill's process (chaos/processes.py Stack)."""

    def describe(self) -> str:
        return f"{self.action}{' ' + self.target if self.target else ''} at {self.at:.0f} s"


@dataclass(frozen=True)
class MixPlan:
    seed: int
    jobs: list[MixJob]
    runs: list[MixRun]
    phases: list[Phase]
    events: list[MixEvent]
    provider: dict[str, Any] = field(default_factory=dict)
    """Settings of the fake provider's POST /_fake/faults, kept all drill long."""
    capped_share: float = 0.2
    """The capped feature's budget: this share of its jobs' worst cases (a call costs about two
    fifths of its worst case: the budget runs out part of the way through its jobs)."""
    key_share: float = 0.2
    """The parent key's budget: this share of the keyed jobs' and keyed runs' worst cases."""

    def describe(self) -> str:
        kinds = {kind: sum(1 for job in self.jobs if job.kind == kind) for kind in MIX_KINDS}
        capped = sum(1 for run in self.runs if run.cap_turns is not None)
        hangs = sum(1 for run in self.runs if run.hang)
        return (
            ", ".join(f"{n} {kind}" for kind, n in kinds.items())
            + f"; {len(self.runs)} agent runs ({capped} capped, {hangs} with a hanging tool)"
        )


def mix_plan(options: DrillOptions, seed: int) -> MixPlan:
    rng = random.Random(seed)
    duration = options.duration
    # Every kind at least once (a reduced drill too), the rest drawn by weight.
    kinds = list(MIX_KINDS)[: options.jobs]
    kinds += rng.choices(list(MIX_KINDS), weights=list(MIX_KINDS.values()), k=options.jobs)
    kinds = kinds[: options.jobs]
    rng.shuffle(kinds)
    jobs = [_job(rng, kind) for kind in kinds]
    capped = [index for index, job in enumerate(jobs) if job.kind == "capped"]
    if capped:
        # One capped job whose worst case the capped budget can never take: refused at submit
        # whatever the timing (the others' are refused only if the window fills in time).
        jobs[capped[0]] = replace(jobs[capped[0]], output_tokens=OVERSIZED_TOKENS)
    fallback = [index for index, job in enumerate(jobs) if job.kind == "fallback"]
    if fallback and len(jobs[fallback[0]].script) < 2:
        # One job that falls back whatever the draw: one 529 is answered by a retry on the
        # job's own model (LLM_FALLBACK_AFTER_ATTEMPTS is 2), and seed 951820 drew one for
        # each of its three, so no job of that drill fell back.
        jobs[fallback[0]] = replace(jobs[fallback[0]], script=("529",) * 3)
    runs = [
        MixRun(
            cap_turns=rng.choice((None, rng.uniform(0.6, 1.4), rng.uniform(1.5, 3.5))),
            hang=rng.random() < 0.5,
            key=rng.choice(("", "", "child")),
        )
        for _ in range(options.agent_runs)
    ]
    if runs:
        # The hanging tool in every drill with runs: in a run that no cap refuses at once, nor
        # a key whose budget the drill spends (seed 337220: both runs with it were refused).
        runs[0] = replace(runs[0], hang=True, cap_turns=None, key="")
    phases: list[Phase] = []
    events: list[MixEvent] = []

    def window(kind: str, start: tuple[float, float], length: tuple[float, float]) -> None:
        at = rng.uniform(*start) * duration
        phases.append(Phase(kind, at, at + max(2.0, rng.uniform(*length) * duration)))

    if options.has("429"):
        window("429", (0.1, 0.5), (0.15, 0.3))
    if options.has("529"):
        for _ in range(rng.choice((1, 2))):
            window("529", (0.1, 0.8), (0.04, 0.1))
    if options.has("drop"):
        phases.append(Phase("drop", 0.05 * duration, 0.95 * duration))
    # The conductor's kill of the llm worker running the scheduler, and its flush while no
    # scheduler runs, come first; the llm worker's other kill and the second flush (with a live
    # scheduler) only after them, so that they do not make a scheduler of their own in between.
    kill_at = rng.uniform(0.15, 0.4) * duration
    flush_at = kill_at + max(3.0, rng.uniform(0.05, 0.12) * duration)
    later = (flush_at / duration + 0.05, 0.9)
    if options.has("kill"):
        phases.append(Phase("kill", kill_at))
        for target in ("worker_agents", "deferred"):
            if rng.random() < 0.7:
                events.append(MixEvent(rng.uniform(0.1, 0.85) * duration, "kill", target))
        if rng.random() < 0.7:
            events.append(MixEvent(rng.uniform(*later) * duration, "kill", "worker_llm_1"))
    if options.has("flush"):
        phases.append(Phase("flush", flush_at))
        events.append(MixEvent(rng.uniform(*later) * duration, "flush"))
    provider = {
        "stream_tokens_per_second": round(rng.uniform(*STREAM_TOKENS_PER_SECOND)),
        "batch_processing_seconds": round(rng.uniform(1.0, 6.0), 1),
        "batch_errored_rate": round(rng.uniform(0.0, 0.1), 3),
        "batch_expired_rate": round(rng.uniform(0.0, 0.05), 3),
    }
    return MixPlan(
        seed=seed,
        jobs=jobs,
        runs=runs,
        phases=sorted(phases, key=lambda phase: phase.start),
        events=sorted(events, key=lambda event: event.at),
        provider=provider,
        capped_share=rng.uniform(0.1, 0.25),
        key_share=rng.uniform(0.1, 0.25),
    )


def _job(rng: random.Random, kind: str) -> MixJob:
    model = rng.choice(MODELS)
    if kind == "keyed":
        return MixJob(kind, model, key=rng.choice(("parent", "child")))
    if kind == "deferred":
        near = rng.random() < 0.4
        return MixJob(
            kind,
            model,
            deadline_after=rng.uniform(1.0, 8.0) if near else None,
            script=("529",) * rng.choice((0, 2, 3)) if near else (),
        )
    if kind == "fallback":
        return MixJob(kind, model, script=("529",) * rng.choice((1, 2, 2, 3)))
    if kind == "cancel":
        return MixJob(
            kind,
            model,
            cancel_after=rng.uniform(0.2, 1.5),
            output_tokens=rng.randint(*LONG_STREAM_TOKENS),
        )
    if kind == "scripted":
        return MixJob(kind, model, script=rng.choice(SCRIPTS))
    return MixJob(kind, model)
