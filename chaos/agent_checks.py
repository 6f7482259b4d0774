"""The drill's checks of its agent runs (only with ``--agent-runs``): every run ends, and no
tool call recorded as completed ever started again (an interrupted call may run again: at
least once for those, exactly once for completed ones)."""

from collections import defaultdict
from datetime import UTC
from pathlib import Path

from agents.models import AgentRun, AgentStep
from chaos.checks import Check
from chaos.record import DrillRecord

__all__ = ["agent_checks", "AGENT_CHECKS"]

AGENT_CHECKS = ("agent runs all final", "no completed tool call ran again")


def _runs_final(record: DrillRecord) -> Check:
    runs = AgentRun.objects.filter(id__in=record.agent_run_ids)
    counts: dict[str, int] = defaultdict(int)
    for status in runs.values_list("status", flat=True):
        counts[status] += 1
    active = sum(counts[s] for s in AgentRun.ACTIVE_STATUSES)
    failed = sorted(
        set(runs.filter(status=AgentRun.Status.FAILED).values_list("error_code", flat=True))
    )
    return Check(
        AGENT_CHECKS[0],
        active == 0 and sum(counts.values()) == len(record.agent_run_ids) > 0,
        f"{sum(counts.values())}/{len(record.agent_run_ids)} runs: "
        + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        + (f" (failed: {', '.join(failed)})" if failed else ""),
    )


def _ran_again(record: DrillRecord) -> Check:
    starts: dict[str, list[float]] = defaultdict(list)
    path = Path(record.agent_tool_log)
    for line in path.read_text().splitlines() if path.is_file() else []:
        what, call_id, at = line.split()
        if what == "start":
            starts[call_id].append(float(at))
    steps = AgentStep.objects.filter(
        run_id__in=record.agent_run_ids, kind=AgentStep.Kind.TOOL, status="completed"
    ).exclude(is_error=True)
    completed = 0
    again: list[str] = []
    interrupted = 0
    for call_id, finished_at in steps.values_list("call_id", "finished_at"):
        completed += 1
        done = finished_at.astimezone(UTC).timestamp() if finished_at else float("inf")
        if any(at > done for at in starts[call_id]):
            again.append(call_id)
        interrupted += max(0, len(starts[call_id]) - 1)
    return Check(
        AGENT_CHECKS[1],
        not again and completed > 0,
        f"{completed} completed tool calls, {sum(len(v) for v in starts.values())} starts; "
        f"{interrupted} started again before their completion was recorded (interrupted); "
        f"{len(again)} started after it" + (f" (e.g. {again[0]})" if again else ""),
    )


def agent_checks(record: DrillRecord) -> list[Check]:
    if not record.agent_run_ids:
        return []
    return [_runs_final(record), _ran_again(record)]
