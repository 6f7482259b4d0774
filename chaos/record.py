"""What happened during a drill: filled in by chaos/drill.py, read by the checks."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chaos.plan import DrillOptions, Knob, Phase
from chaos.provider import BilledCall
from chaos.receiver import Received

__all__ = [
    "BreakerEvent",
    "BudgetLook",
    "BudgetToggleEvent",
    "DrillRecord",
    "FlushEvent",
    "KillEvent",
    "LongCallEvent",
    "MixRecord",
    "ReconcilerStopEvent",
    "RevokeEvent",
    "TrickleEvent",
]


@dataclass
class KillEvent:
    at: float
    """Seconds from the drill's start."""
    process: str
    pid: int
    held_scheduler: bool
    """Whether the killed worker ran the llm queue's rq scheduler (it should)."""
    jobs_in_flight: list[str] = field(default_factory=list)
    restarted_after: float | None = None
    """Seconds until runtime.respawn had started the worker again."""


@dataclass
class FlushEvent:
    at: float
    keys: int
    """Keys in the Redis database just before the flush."""
    scheduler: str
    """Who held the llm queue's scheduler lock at the flush, in words."""
    scheduler_running: bool
    waiting_jobs: list[str] = field(default_factory=list)
    """The drill's queued and retrying jobs at the flush: their RQ jobs were wiped."""


@dataclass
class BreakerEvent:
    fault_at: float
    opened_at: float | None = None
    reason: str = ""
    openings: int = 0
    """Closed -> open transitions seen while the drill watched (every half second)."""
    closed_at: float | None = None
    closed_by_drill: bool = False
    closed_by: str = ""


@dataclass
class LongCallEvent:
    at: float
    latency_seconds: float
    stale_after_seconds: float
    arrivals: int = 0
    """Calls that arrived at the provider while it answered slowly."""
    closed_at: float | None = None


@dataclass
class TrickleEvent:
    at: float
    deadline_seconds: float
    """The deadline of the drill's calls (connect + read timeout, providers/limits.py)."""
    job_ids: list[str] = field(default_factory=list)
    """The jobs whose calls the provider trickled (its billing log), once the fault was lifted."""
    lifted_at: float | None = None


@dataclass
class BudgetToggleEvent:
    budget_id: int
    disabled_at: float
    disabled_wall: datetime
    enabled_at: float | None = None
    enabled_wall: datetime | None = None


@dataclass
class ReconcilerStopEvent:
    at: float
    process: str
    planned_seconds: float
    exited_after: float | None = None
    restarted_at: float | None = None
    waiting_at_restart: list[str] = field(default_factory=list)
    """The drill's jobs not final when the reconciler came back."""


@dataclass
class RevokeEvent:
    opened_at: float
    revoked_at: float | None = None
    heard_before: int = 0
    heard_after: int = 0
    """Events the socket heard more than a second after its token was deleted."""
    closed_at: float | None = None
    close_code: int | None = None
    error: str = ""


@dataclass
class MixRecord:
    """What the mixed drill (chaos/mix.py) set up and did, beyond what every drill records."""

    seed: int
    plan: str
    """The plan in words (chaos/mix_plan.py ``MixPlan.describe``)."""
    kinds: dict[str, str] = field(default_factory=dict)
    """job id -> the kind of work it was submitted as (turns of agent runs are not in it)."""
    refused: dict[str, int] = field(default_factory=dict)
    """kind -> submissions refused at submit (429); "run" for agent runs."""
    key_ids: dict[str, int] = field(default_factory=dict)
    """"parent" / "child" -> the API key's id."""
    cancels_asked: dict[str, float] = field(default_factory=dict)
    """job id -> seconds into its call when the cancel was asked for (it was running)."""
    cancels_of_waiting: int = 0
    """Cancels of jobs still waiting (queued or retrying: nothing in flight to stop)."""
    cancels_missed: int = 0
    """Jobs to cancel that ended before their moment came."""
    events: list[str] = field(default_factory=list)
    """The extra kills and flushes, as they happened."""
    policies: list[str] = field(default_factory=list)


@dataclass
class BudgetLook:
    """The highest spend each budget's window showed at any look, and the looks above limit."""

    looks: int = 0
    highest: dict[int, tuple[str, str]] = field(default_factory=dict)
    """budget id -> (spent, limit) at its highest look, as text."""
    above: list[str] = field(default_factory=list)


@dataclass
class DrillRecord:
    options: DrillOptions
    phases: list[Phase]
    knobs: list[Knob]
    started_at: datetime
    database: str
    redis: str
    user_id: int = 0
    budget_id: int | None = None
    route_ids: list[int] = field(default_factory=list)
    earlier_jobs: set[str] = field(default_factory=set)
    """Jobs not final when the drill started (an earlier drill's, left stuck): the drill's
    workers run them too, and their calls are not the drill's."""
    open_incidents: set[str] = field(default_factory=set)
    """Failure fingerprints already paged and still open (within ALERT_DEDUP_SECONDS) when the
    drill started, e.g. by an earlier drill: their new dead letters fold in, unpaged."""
    job_ids: list[str] = field(default_factory=list)
    agent_run_ids: list[str] = field(default_factory=list)
    """The agent runs started (``--agent-runs``); their turns' jobs join ``job_ids`` once the
    drain is over (``agent_job_ids``), so that every job check covers them too."""
    agent_job_ids: list[str] = field(default_factory=list)
    agent_tool_log: str = ""
    kill: KillEvent | None = None
    flush: FlushEvent | None = None
    breaker: BreakerEvent | None = None
    long_call: LongCallEvent | None = None
    trickle: TrickleEvent | None = None
    budget_toggle: BudgetToggleEvent | None = None
    reconciler_stop: ReconcilerStopEvent | None = None
    kill_waiting: KillEvent | None = None
    revoke: RevokeEvent | None = None
    capped_budget_id: int | None = None
    """The drill's tight budget (one feature): some of its jobs must be refused."""
    refused_at_submit: int = 0
    """Jobs refused at submit (429: their budget spent); they are not in job_ids."""
    more_budget_ids: list[int] = field(default_factory=list)
    """The mixed drill's other budgets (its keys', chaos/mix.py): looked at like the others."""
    mix: MixRecord | None = None
    """What the mixed drill (``--mix``) did; None for the classic drill."""
    budget_looks: BudgetLook = field(default_factory=BudgetLook)
    negative_samples: int = 0
    negatives_seen: list[str] = field(default_factory=list)
    provider_stats: dict[str, Any] = field(default_factory=dict)
    billing: list[BilledCall] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    metrics_command: tuple[int, str] = (0, "")
    """``llm_metrics --check``: exit code and output."""
    processes_died: list[str] = field(default_factory=list)
    load_seconds: float = 0.0
    drain_seconds: float = 0.0
    log_dir: str = ""
    notes: list[str] = field(default_factory=list)

    def budget_ids(self) -> list[int]:
        """Every budget of the drill's: looked at all along, and checked at the end."""
        ids = [self.budget_id, self.capped_budget_id, *self.more_budget_ids]
        return [budget_id for budget_id in ids if budget_id is not None]
