"""The cluster drill's checks, per scenario, from the provider's own logs (which host sent each
job's call and when: ``/_fake/calls``; what it billed: ``/_fake/billing``, ``/_fake/stats``)
and the database:

- every job completed (after the heal, or after the kill);
- no job stuck two minutes after the heal (or the kill);
- no call sent twice while the host lived: in a freeze the host never dies, so a second call for
  a job whose first call it sent counts, unless the host had cut that call off itself before
  (self-fencing, invariant 12: its worker's log says so, ``FENCE_MARK``): then its call was
  given up, and running the job again is the recovery; the figures say which host sent each call
  and when, from the freeze, and how many jobs had two calls at once;
- after a kill, the killed host's jobs are sent again within two minutes;
- the ledger holds what the provider billed, per model and job by job (chaos/mix_checks.py).
"""

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from chaos.checks import Check
from chaos.cluster.scenarios import STUCK_SECONDS, ProviderCall, ScenarioRecord
from chaos.mix_checks import ledger_against_bill
from chaos.plan import DrillOptions
from chaos.record import DrillRecord
from jobs.models import LlmJob

__all__ = ["FENCE_MARK", "scenario_checks"]

FENCE_MARK = ("jobs.heartbeat", "cut off")
"""A line of the llm worker's log from this logger whose message holds this: the worker cut
its own call off for that job (``job_id``), its claim renewed on neither path in time."""


def _calls_by_job(record: ScenarioRecord) -> dict[str, list[ProviderCall]]:
    calls: dict[str, list[ProviderCall]] = defaultdict(list)
    for call in sorted(record.calls, key=lambda c: c.arrived):
        calls[call.job_id].append(call)
    return calls


def _describe(record: ScenarioRecord, calls: list[ProviderCall]) -> str:
    return ", ".join(
        f"{c.host} {record.rel(c.arrived):+.0f}..{record.rel(c.ended):+.0f} s" for c in calls
    )


def _completed(record: ScenarioRecord) -> Check:
    statuses = record.statuses
    done = sum(status == LlmJob.Status.COMPLETED for status in statuses.values())
    others = sorted(
        f"{job[:8]} {status}" for job, status in statuses.items() if status != "completed"
    )
    last = max(record.final_at.values(), default=0.0)
    after = "heal" if record.heal_at is not None else "kill"
    when = f"{last:.0f} s after the {'freeze' if record.heal_at is not None else 'kill'}"
    if record.heal_at is not None:
        when += f" ({last - record.heal_at:+.0f} s from the heal)"
    figures = (
        f"{done}/{len(record.job_ids)} completed ({len(record.long_jobs)} long on "
        f"{record.victim}, {len(record.other_jobs)} more), the last final {when}"
        + (f"; not completed: {', '.join(others)}" if others else "")
    )
    return Check(f"every job completed after the {after}", done == len(record.job_ids), figures)


def _stuck(record: ScenarioRecord) -> Check:
    after = "heal" if record.heal_at is not None else "kill"
    origin = record.heal_at or 0.0
    stuck = [
        job
        for job in record.job_ids
        if job not in record.final_at or record.final_at[job] - origin > STUCK_SECONDS
    ]
    figures = (
        f"{len(stuck)} of {len(record.job_ids)} not final {STUCK_SECONDS:.0f} s after the {after}"
    )
    return Check(f"no job stuck 2 min after the {after}", not stuck, figures)


def _fenced_at(record: ScenarioRecord) -> dict[str, float]:
    """Job id -> when (wall clock) a worker cut its call off, from its log (the victim's and
    ``worker_logs``)."""
    fenced: dict[str, float] = {}
    lines = []
    for log in [record.victim_log, *record.worker_logs]:
        path = Path(log)
        lines += path.read_text(errors="replace").splitlines() if path.is_file() else []
    for line in lines:
        if FENCE_MARK[0] not in line or FENCE_MARK[1] not in line:
            continue
        try:
            entry = json.loads(line)
            at = datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp()
        except (ValueError, KeyError):
            continue
        if entry.get("logger") == FENCE_MARK[0] and FENCE_MARK[1] in entry.get("message", ""):
            job = str(entry.get("job_id", ""))
            fenced[job] = min(at, fenced.get(job, at))
    return fenced


def _sent_twice(record: ScenarioRecord) -> Check:
    twice, after_fence = [], []
    fenced = _fenced_at(record)
    for job, calls in _calls_by_job(record).items():
        if len(calls) < 2 or calls[0].host != record.victim:
            continue
        if job in fenced and calls[1].arrived >= fenced[job]:
            after_fence.append(record.rel(fenced[job]))
        else:
            twice.append(f"{job[:8]}: {_describe(record, calls)}")
    overlapping = sum(
        1
        for calls in _calls_by_job(record).values()
        if any(b.arrived < a.ended for a, b in zip(calls, calls[1:], strict=False))
    )
    figures = (
        f"{len(twice)} of {len(record.long_jobs)} jobs sent by {record.victim} sent again "
        f"while it held them ({overlapping} with two calls at once)"
        + (
            f", {len(after_fence)} sent again after {record.victim} had cut its call off "
            f"(self-fenced {min(after_fence):+.0f}..{max(after_fence):+.0f} s from the freeze)"
            if after_fence
            else ""
        )
        + f"; {len(record.calls)} calls for "
        f"{len(record.job_ids)} jobs"
        + (f"; e.g. {'; '.join(twice[:4])} (seconds from the freeze)" if twice else "")
    )
    return Check("no call sent twice while the host lived", not twice, figures)


def _ran_again(record: ScenarioRecord) -> Check:
    late, times = [], []
    calls = _calls_by_job(record)
    for job in record.long_jobs:
        again = [c for c in calls.get(job, []) if c.arrived >= record.fault_at]
        if not again:
            late.append(f"{job[:8]} never")
            continue
        after = record.rel(again[0].arrived)
        times.append(after)
        if after > STUCK_SECONDS:
            late.append(f"{job[:8]} after {after:.0f} s")
    figures = (
        f"{len(times)}/{len(record.long_jobs)} killed jobs sent again"
        + (f", {min(times):.0f}-{max(times):.0f} s after the kill" if times else "")
        + f" ({len(record.killed_pids)} processes killed)"
        + (f"; late: {', '.join(late)}" if late else "")
    )
    return Check("the killed host's jobs ran again within 2 min", not late, figures)


def _money(record: ScenarioRecord) -> list[Check]:
    drill = DrillRecord(
        options=DrillOptions(),
        phases=[],
        knobs=[],
        started_at=datetime.fromtimestamp(record.started, UTC),
        earlier_jobs=set(record.earlier_jobs),
        database="",
        redis="",
        job_ids=list(record.job_ids),
        billing=list(record.billing),
        provider_stats=dict(record.provider_stats),
    )
    return ledger_against_bill(drill)


def scenario_checks(record: ScenarioRecord) -> list[Check]:
    if record.heal_at is not None:
        return [_completed(record), _stuck(record), _sent_twice(record), *_money(record)]
    return [_completed(record), _stuck(record), _ran_again(record), *_money(record)]
