"""The drill's invariant checks on jobs and money, read from the database and from what the
fake provider billed (its billing log: one entry per billed call, keyed by the job id the
worker sent as ``Idempotency-Key``).

- every job ended: ``completed``, or ``failed`` with its FailureRecord; none lost or stuck;
- the ledger's exact rows (answers it saw, late results booked as corrections) equal what the
  provider billed for those very calls, request id by request id;
- what the provider billed for calls whose answer nobody recorded (a dropped connection, a
  killed worker) is covered by the unknown-outcome estimates, job by job;
- no job was billed twice unless it was on the killed worker or the ledger booked an unknown
  outcome for it (a dropped connection is billed, then retried: paid twice, and known);
- nothing went negative; the metrics' counters equal the ledger (the budgets: budget_checks.py).
"""

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Count

from chaos import events
from chaos.record import DrillRecord
from dlq.models import FailureRecord
from jobs.models import LlmJob
from ledger.models import CostEntry
from ledger.pricing import MICRO_USD
from metrics.selectors import counter_totals, ledger_totals

__all__ = ["Check", "LedgerView", "job_checks"]


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    figures: str


def _usd(amount: Decimal) -> str:
    return f"${amount:.6f}"


@dataclass
class LedgerView:
    """The drill jobs' ledger rows, as the money checks need them."""

    exact: dict[str, Decimal] = field(default_factory=dict)
    """request id -> cost of every answer the ledger saw (an attempt's, or a late result's)."""
    exact_by_job: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    estimates_by_job: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    """Uncorrected unknown-outcome estimates per job."""
    answers_by_job: Counter[str] = field(default_factory=Counter)
    unknowns_by_job: Counter[str] = field(default_factory=Counter)
    worker_lost: set[str] = field(default_factory=set)

    def answer(self, job: str, request_id: str, cost: Decimal) -> None:
        self.exact[request_id] = cost
        self.exact_by_job[job] += cost
        self.answers_by_job[job] += 1

    @classmethod
    def read(cls, job_ids: list[str]) -> "LedgerView":
        view = cls()
        rows = list(CostEntry.objects.filter(job_id__in=job_ids))
        corrections = {
            row.corrects_id: row for row in rows if row.entry_type == CostEntry.EntryType.CORRECTION
        }
        for row in rows:
            job = str(row.job_id)
            if row.entry_type != CostEntry.EntryType.ATTEMPT:
                continue
            if row.reason_code == "worker_lost":
                view.worker_lost.add(job)
            if row.is_estimated:
                view.unknowns_by_job[job] += 1
                correction = corrections.get(row.id)
                if correction is None:
                    view.estimates_by_job[job] += row.cost_usd
                elif correction.outcome == CostEntry.Outcome.SUCCESS:
                    # A late result: estimate + correction = what the answer cost.
                    view.answer(job, correction.request_id, row.cost_usd + correction.cost_usd)
                # (a late error answer: known now to have cost nothing)
            elif row.outcome == CostEntry.Outcome.SUCCESS:
                view.answer(job, row.request_id, row.cost_usd)
        return view


def _jobs_final(record: DrillRecord) -> Check:
    counts = dict(
        LlmJob.objects.filter(id__in=record.job_ids)
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    found = sum(counts.values())
    lost = len(record.job_ids) - found
    failed = list(
        LlmJob.objects.filter(id__in=record.job_ids, status=LlmJob.Status.FAILED).values_list(
            "id", flat=True
        )
    )
    recorded = FailureRecord.objects.filter(job_id__in=failed).values("job_id").distinct().count()
    stuck = LlmJob.objects.filter(id__in=record.job_ids).exclude(status__in=LlmJob.FINAL_STATUSES)
    examples = ", ".join(f"{job.id} {job.status}" for job in stuck[:3])
    stuck_count = stuck.count()
    passed = (
        lost == 0
        and stuck_count == 0
        and recorded == len(failed)
        and len(record.job_ids) - len(record.agent_job_ids) + record.refused_at_submit
        == record.options.jobs
    )
    figures = (
        f"{found - stuck_count}/{len(record.job_ids)} final: "
        f"{counts.get(LlmJob.Status.COMPLETED, 0)} completed, {len(failed)} failed "
        f"({recorded} with a FailureRecord), {counts.get(LlmJob.Status.CANCELLED, 0)} cancelled; "
        f"{lost} lost, {stuck_count} stuck"
        + (
            f"; {record.refused_at_submit} refused at submit (their budget spent)"
            if record.refused_at_submit
            else ""
        )
    )
    return Check("jobs all final", passed, figures + (f" (e.g. {examples})" if examples else ""))


def _as_booked(cost: Decimal) -> Decimal:
    """A provider's amount as the ledger books it: in micro-dollars, half up
    (ledger/pricing.py). A cache write at 1.25 times the input rate bills fractions of one."""
    return cost.quantize(MICRO_USD, rounding=ROUND_HALF_UP)


def _money(record: DrillRecord, view: LedgerView) -> list[Check]:
    drill = set(record.job_ids)
    calls = [call for call in record.billing if call.job_id in drill]
    earlier = [call for call in record.billing if call.job_id in record.earlier_jobs]
    foreign = [
        call
        for call in record.billing
        if call.job_id not in drill and call.job_id not in record.earlier_jobs
    ]
    by_request = {call.request_id: call for call in calls}
    missing = [rid for rid in view.exact if rid not in by_request]
    differ = [
        rid
        for rid, cost in view.exact.items()
        if rid in by_request and _as_booked(by_request[rid].cost_usd) != cost
    ]
    ledger_exact = sum(view.exact.values(), Decimal(0))
    billed_for_those = sum(
        (_as_booked(by_request[r].cost_usd) for r in view.exact if r in by_request), Decimal(0)
    )
    exact = Check(
        "ledger exact = provider billed",
        not missing and not differ and ledger_exact == billed_for_those,
        f"ledger {_usd(ledger_exact)} for {len(view.exact)} answers = provider "
        f"{_usd(billed_for_those)} for those calls"
        + (f"; {len(missing)} answers the provider never billed" if missing else "")
        + (f"; {len(differ)} priced differently" if differ else ""),
    )
    unmatched: dict[str, Decimal] = defaultdict(Decimal)
    for call in calls:
        if call.request_id not in view.exact:
            unmatched[call.job_id] += call.cost_usd
    uncovered = [job for job, cost in unmatched.items() if cost > view.estimates_by_job[job]]
    billed = sum((call.cost_usd for call in calls), Decimal(0))
    estimates = sum(view.estimates_by_job.values(), Decimal(0))
    covered = Check(
        "unknown outcomes covered",
        billed <= ledger_exact + estimates and not uncovered and not foreign,
        f"provider billed {_usd(billed)} <= ledger exact {_usd(ledger_exact)} + estimates "
        f"{_usd(estimates)}; {sum(1 for c in calls if c.request_id not in view.exact)} billed "
        f"calls without a recorded answer ({_usd(sum(unmatched.values(), Decimal(0)))}), "
        f"{len(uncovered)} jobs not covered by their estimates"
        + (f"; {len(foreign)} calls for jobs not in the drill" if foreign else "")
        + (f" ({len(earlier)} calls for jobs unfinished before it left out)" if earlier else ""),
    )
    return [exact, covered]


def _billed_twice(record: DrillRecord, view: LedgerView) -> Check:
    drill = set(record.job_ids)
    per_job = Counter(call.job_id for call in record.billing if call.job_id in drill)
    twice = {job: n for job, n in per_job.items() if n > 1}
    killed = set(record.kill.jobs_in_flight if record.kill else ()) | view.worker_lost
    on_killed = {job for job in twice if job in killed}
    known = {
        job
        for job, n in twice.items()
        if job not in on_killed
        and view.answers_by_job[job] <= 1
        and n <= view.answers_by_job[job] + view.unknowns_by_job[job]
    }
    others = set(twice) - on_killed - known
    return Check(
        "no job billed twice",
        not others,
        f"{len(twice)} jobs billed more than once: {len(on_killed)} on the killed worker, "
        f"{len(known)} after an unknown outcome the ledger booked (dropped connection); "
        f"{len(others)} others" + (f" (e.g. {sorted(others)[0]})" if others else ""),
    )


def _nothing_negative(record: DrillRecord) -> Check:
    seen = record.negatives_seen + events.negative_values(
        job_ids=record.job_ids, budget_id=record.budget_id
    )
    figures = (
        f"no negative counter, budget figure or job cost in {record.negative_samples + 1} looks"
    )
    if seen:
        figures = f"{len(seen)} negative values, e.g. {seen[0]}"
    # Whether each budget's window equals the ledger is its own check (budget_checks.py).
    return Check("nothing negative", not seen, figures)


def _metrics(record: DrillRecord) -> Check:
    differences = counter_totals().differences(ledger_totals())
    code, output = record.metrics_command
    last = output.splitlines()[-1] if output else ""
    return Check(
        "metrics = ledger",
        not differences and code == 0,
        f"{len(differences)} counters differ from the ledger"
        + (f" (e.g. {differences[0]})" if differences else "")
        + f"; llm_metrics --check: exit {code} ({last})",
    )


def job_checks(record: DrillRecord, *, per_call: bool = True) -> list[Check]:
    """``per_call``: the ledger against the provider call by call, by request id (the mixed
    drill, whose batch items have none, checks per model and per job instead: mix_checks.py)."""
    checks = [_jobs_final(record)]
    if per_call:
        view = LedgerView.read(record.job_ids)
        checks += [*_money(record, view), _billed_twice(record, view)]
    return [*checks, _nothing_negative(record), _metrics(record)]
