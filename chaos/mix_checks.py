"""The mixed drill's checks (chaos/mix.py), read from the provider's own log: its bill per model
(``/_fake/stats`` ``billed_by_model``: tokens of each kind and cost) and every call it billed
with the ``Idempotency-Key`` (our job id) or the batch item's ``custom_id`` it came with
(``/_fake/billing``), against the ledger; never from our rows alone.

- tokens booked = tokens billed, per model: every answer we heard is booked, kind by kind, at
  the model that ran it; a call nobody heard back from (a cut stream, a killed worker, a
  cancel) may be booked above what it was billed, never below; in money too;
- no job booked below its bill: the same, job by job;
- budgets, keys and caps held: what the provider billed for each budget's jobs (feature, user,
  a key and the keys it minted) is within its limit, and for each agent run's turns within
  its ``max_cost_usd``; so is what the ledger booked for them;
- no tool side effect after its timeout: the hanging tool's side effect never came (its call is
  stopped at its timeout);
- the mix ran every kind: each kind of work met its fault (a batch answered, a fallback, a
  stream cancelled while it streamed, a cut call, a budget's refusal, a tool timed out).

Every job final, agent runs final, no completed tool call run again, nothing negative, metrics
= ledger, the budget windows at every look, and the storms, kill and flush are the classic
drill's checks, run here as they are.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from django.db.models import Q, Sum

from agents.models import AgentRun, AgentStep
from chaos.agent_checks import agent_checks
from chaos.agent_tools import HANG_TIMEOUT_SECONDS, HANG_TOOL
from chaos.budget_checks import CAPPED_REFUSAL, budget_checks, scope_filter
from chaos.checks import Check, job_checks
from chaos.fault_checks import fault_checks
from chaos.fault_checks_more import NOT_HAPPENED
from chaos.mix import CAP_REASON
from chaos.mix_plan import FALLBACK_MODEL
from chaos.record import DrillRecord
from dlq.models import FailureRecord
from jobs.models import LlmJob
from ledger.budgets import window_bounds
from ledger.models import Budget, CostEntry
from ledger.pricing import MICRO_USD, estimate_input_tokens, tools_tokens

__all__ = ["MIX_CHECKS", "ledger_against_bill", "mix_checks"]

MIX_CHECKS = (
    "tokens booked = tokens billed, per model",
    "no job booked below its bill",
    "budgets, keys and run caps held (provider's bill)",
    "no tool side effect after its timeout",
    "the mix ran every kind",
)
KINDS = ("input", "output", "cache write", "cache read")
"""Token kinds as the provider bills them (cache writes of both lifetimes together)."""
ROUNDING = MICRO_USD / 2
"""Each ledger row is rounded half up to the micro-dollar; the provider's bill is exact."""


def _usd(amount: Decimal) -> str:
    return f"${amount:.6f}"


@dataclass
class ModelBook:
    """One model's ledger rows, split by what we know of each call."""

    heard: list[int] = field(default_factory=lambda: [0] * len(KINDS))
    """Tokens of the answers we heard (a late result: its correction's real usage)."""
    bounded: list[int] = field(default_factory=lambda: [0] * len(KINDS))
    """Tokens booked for calls cut short after their input was reported (a stream that broke,
    a cancel): bounds, not bills."""
    unknown: int = 0
    """Calls booked at their upper bound, their input never reported."""
    unknown_bound: list[int] = field(default_factory=lambda: [0, 0])
    """[input of every kind, output]: the tokens those upper bounds were priced from (the
    input estimate with the tools, and max_tokens or more)."""
    heard_usd: Decimal = Decimal(0)
    booked_usd: Decimal = Decimal(0)
    rows: int = 0


def _tokens(row: CostEntry) -> list[int]:
    return [
        row.input_tokens,
        row.output_tokens,
        row.cache_write_5m_tokens + row.cache_write_1h_tokens,
        row.cache_read_tokens,
    ]


def _add(into: list[int], more: list[int]) -> list[int]:
    return [a + b for a, b in zip(into, more, strict=True)]


def _upper_bound_tokens(job: LlmJob, row: CostEntry) -> list[int]:
    """[input, output] tokens an attempt booked at its upper bound was priced from
    (ledger/pricing.py ``upper_bound_cost``, ``broken_stream_cost``)."""
    tools = (job.params or {}).get("tools")
    tokens_in = estimate_input_tokens(messages=job.request_messages, system=job.system)
    return [tokens_in + tools_tokens(tools), max(row.output_tokens, job.max_tokens)]


def _books(record: DrillRecord) -> dict[str, ModelBook]:
    """The ledger rows of every call the drill's provider can have billed: the drill's jobs',
    and those booked meanwhile for jobs left unfinished before it (its workers ran them too)."""
    mine = Q(job_id__in=record.job_ids)
    if record.earlier_jobs:
        mine |= Q(job_id__in=list(record.earlier_jobs), created_at__gte=record.started_at)
    rows = list(CostEntry.objects.filter(mine).select_related("job"))
    corrected = {row.corrects_id for row in rows if row.corrects_id is not None}
    books: dict[str, ModelBook] = defaultdict(ModelBook)
    for row in rows:
        book = books[row.model]
        book.rows += 1
        book.booked_usd += row.cost_usd
        tokens = _tokens(row)
        if row.entry_type == CostEntry.EntryType.CORRECTION or not row.is_estimated:
            # An answer heard, or the real usage of an attempt first booked as unknown.
            book.heard = _add(book.heard, tokens)
            book.heard_usd += row.cost_usd
        elif row.id in corrected:
            book.heard_usd += row.cost_usd  # estimate + correction = what it cost
        elif tokens[0] or tokens[2] or tokens[3]:
            book.bounded = _add(book.bounded, tokens)
        else:
            book.unknown += 1
            assert row.job is not None
            book.unknown_bound = _add(book.unknown_bound, _upper_bound_tokens(row.job, row))
    return books


def _billed_tokens(bill: dict[str, object]) -> list[int]:
    return [
        int(bill.get("input_tokens", 0)),  # type: ignore[call-overload]
        int(bill.get("output_tokens", 0)),  # type: ignore[call-overload]
        int(bill.get("cache_creation_input_tokens", 0)),  # type: ignore[call-overload]
        int(bill.get("cache_read_input_tokens", 0)),  # type: ignore[call-overload]
    ]


def _model_wrong(model: str, tokens: list[int], usd: Decimal, book: ModelBook) -> list[str]:
    """What one model's book gets wrong against its bill."""
    wrong = []
    for kind, paid, heard in zip(KINDS, tokens, book.heard, strict=True):
        if heard > paid:
            wrong.append(f"{model} {kind}: booked {heard} heard > billed {paid}")
    if book.unknown:
        # The upper bounds do not split the input by kind: the input kinds together.
        sides = [
            ("input of every kind", [0, 2, 3], book.unknown_bound[0]),
            ("output", [1], book.unknown_bound[1]),
        ]
    else:
        sides = [(kind, [i], 0) for i, kind in enumerate(KINDS)]
    for what, kinds, unknown in sides:
        paid = sum(tokens[i] for i in kinds)
        booked = sum(book.heard[i] + book.bounded[i] for i in kinds) + unknown
        if paid > booked:
            wrong.append(f"{model} {what}: billed {paid} > booked {booked} (bounds included)")
    tolerance = ROUNDING * book.rows
    if book.heard_usd > usd + tolerance:
        wrong.append(f"{model}: booked {_usd(book.heard_usd)} heard > billed {_usd(usd)}")
    if usd > book.booked_usd + tolerance:
        wrong.append(f"{model}: billed {_usd(usd)} > booked {_usd(book.booked_usd)}")
    return wrong


def _tokens_per_model(record: DrillRecord) -> Check:
    """Per model: tokens heard <= billed, kind by kind; billed <= heard + the bounds of the
    calls cut short + the tokens the upper bounds of calls nobody heard back from were priced
    from; in money, heard <= billed <= booked."""
    billed = record.provider_stats.get("billed_by_model", {})
    books = _books(record)
    parts, wrong = [], []
    for model in sorted(set(billed) | set(books)):
        bill = billed.get(model, {})
        tokens = _billed_tokens(bill)
        usd = Decimal(str(bill.get("cost_usd", "0")))
        book = books.get(model, ModelBook())
        wrong += _model_wrong(model, tokens, usd, book)
        parts.append(
            f"{model} billed {tokens} {_usd(usd)}, booked {book.heard} heard"
            + (f" + {book.bounded} bounds" if any(book.bounded) else "")
            + (
                f" + {book.unknown} upper bounds (of [input, output] {book.unknown_bound})"
                if book.unknown
                else ""
            )
            + f", {_usd(book.booked_usd)}"
        )
    figures = f"[{', '.join(KINDS)}] " + "; ".join(parts or ["nothing billed"])
    if record.earlier_jobs:
        figures += f" ({len(record.earlier_jobs)} jobs from before the drill ran too, counted)"
    if wrong:
        figures = f"{len(wrong)} below or above: {'; '.join(wrong)}. " + figures
    return Check(MIX_CHECKS[0], not wrong and bool(parts), figures)


def _billed_by_job(record: DrillRecord) -> dict[str, Decimal]:
    billed: dict[str, Decimal] = defaultdict(Decimal)
    for call in record.billing:
        billed[call.job_id] += call.cost_usd
    return billed


def _job_below_bill(record: DrillRecord) -> Check:
    billed = _billed_by_job(record)
    drill = set(record.job_ids)
    foreign = {job for job in billed if job not in drill and job not in record.earlier_jobs}
    booked: dict[str, Decimal] = defaultdict(Decimal)
    rows: Counter[str] = Counter()
    for job_id, cost in CostEntry.objects.filter(job_id__in=record.job_ids).values_list(
        "job_id", "cost_usd"
    ):
        booked[str(job_id)] += cost
        rows[str(job_id)] += 1
    below = [
        job for job in drill if billed.get(job, Decimal(0)) > booked[job] + ROUNDING * rows[job]
    ]
    total_billed = sum((billed[job] for job in drill if job in billed), Decimal(0))
    figures = (
        f"{len(billed)} jobs billed {_usd(total_billed)}, booked "
        f"{_usd(sum(booked.values(), Decimal(0)))}; {len(below)} booked below their bill"
        + (
            f" (e.g. {below[0]}: billed {_usd(billed[below[0]])}, booked {_usd(booked[below[0]])})"
            if below
            else ""
        )
        + (f"; {len(foreign)} billed calls for jobs not in the drill" if foreign else "")
    )
    return Check(MIX_CHECKS[1], not below and not foreign, figures)


def _limits_held(record: DrillRecord) -> Check:
    billed = _billed_by_job(record)
    parts, over = [], []
    jobs = LlmJob.objects.filter(id__in=record.job_ids)
    for budget in Budget.objects.filter(id__in=record.budget_ids()).order_by("id"):
        scoped = jobs.filter(scope_filter(budget)).values_list("id", flat=True)
        in_scope = [str(job_id) for job_id in scoped]
        # What its window held before the drill's jobs (an earlier drill's, the same day).
        start, end = window_bounds(budget.period)
        before = CostEntry.objects.filter(
            scope_filter(budget), created_at__gte=start, created_at__lt=end
        ).exclude(job_id__in=in_scope)
        earlier = before.aggregate(total=Sum("cost_usd"))["total"] or Decimal(0)
        paid = earlier + sum((billed.get(job, Decimal(0)) for job in in_scope), Decimal(0))
        booked = CostEntry.objects.filter(job_id__in=in_scope).values_list("cost_usd", flat=True)
        spent = earlier + sum(booked, Decimal(0))
        if paid > budget.limit_usd or spent > budget.limit_usd:
            over.append(f"budget {budget.id} ({budget.name})")
        parts.append(
            f"budget {budget.id} ({budget.name}): billed {_usd(paid)}, booked {_usd(spent)} "
            f"of {_usd(budget.limit_usd)}"
            + (f" ({_usd(earlier)} of it before the drill)" if earlier else "")
        )
    runs = AgentRun.objects.filter(id__in=record.agent_run_ids, max_cost_usd__isnull=False)
    capped = stopped = 0
    highest = Decimal(0)
    for run in runs:
        assert run.max_cost_usd is not None
        capped += 1
        stopped += run.error_code == CAP_REASON
        turns = [
            str(job_id)
            for job_id in AgentStep.objects.filter(run=run, job__isnull=False).values_list(
                "job_id", flat=True
            )
        ]
        paid = sum((billed.get(job, Decimal(0)) for job in turns), Decimal(0))
        spent = sum(
            CostEntry.objects.filter(job_id__in=turns).values_list("cost_usd", flat=True),
            Decimal(0),
        )
        highest = max(highest, max(paid, spent, run.cost_usd) / run.max_cost_usd)
        if max(paid, spent, run.cost_usd) > run.max_cost_usd:
            over.append(
                f"run {run.id}: billed {_usd(paid)}, booked {_usd(spent)}, run "
                f"{_usd(run.cost_usd)} > cap {_usd(run.max_cost_usd)}"
            )
    parts.append(
        f"{capped} runs with a max_cost_usd: at most {highest:.0%} of their cap, "
        f"{stopped} stopped {CAP_REASON}"
    )
    figures = "; ".join(parts)
    if over:
        figures = f"{len(over)} above their limit: {'; '.join(over)}. " + figures
    return Check(MIX_CHECKS[2], not over, figures)


def _tool_effects(record: DrillRecord) -> Check:
    """The hanging tool sleeps past its timeout, then writes its effect: a call stopped at its
    timeout never writes it. Any effect written later than the timeout after its start fails."""
    starts: dict[str, list[float]] = defaultdict(list)
    late = []
    path = Path(record.agent_tool_log)
    lines = path.read_text().splitlines() if path.is_file() else []
    for line in lines:
        what, call_id, at = line.split()
        if what == "start":
            starts[call_id].append(float(at))
        elif what == "effect":
            started = max((s for s in starts[call_id] if s <= float(at)), default=None)
            if started is None or float(at) - started > HANG_TIMEOUT_SECONDS:
                late.append(
                    f"{call_id} {float(at) - started:.1f} s after its start"
                    if started is not None
                    else f"{call_id} (no start)"
                )
    steps = AgentStep.objects.filter(
        run_id__in=record.agent_run_ids, kind=AgentStep.Kind.TOOL, name=HANG_TOOL
    )
    timed_out = sum(
        1 for output in steps.values_list("output", flat=True) if "Timed out" in str(output)
    )
    hang_calls = steps.count()
    figures = (
        f"{hang_calls} calls of {HANG_TOOL} (timeout {HANG_TIMEOUT_SECONDS:g} s, then a side "
        f"effect): {timed_out} answered timed out, "
        f"{sum(len(starts[c]) for c in steps.values_list('call_id', flat=True))} starts; "
        f"{len(late)} side effects after the timeout"
        + (f" ({', '.join(late[:3])})" if late else "")
    )
    if not timed_out:
        return Check(MIX_CHECKS[3], False, NOT_HAPPENED + figures)
    return Check(MIX_CHECKS[3], not late, figures)


def _ran_every_kind(record: DrillRecord) -> Check:
    mix = record.mix
    assert mix is not None
    rows = CostEntry.objects.filter(job_id__in=record.job_ids, entry_type="attempt")
    batch = rows.filter(is_batch=True, outcome=CostEntry.Outcome.SUCCESS)
    answered_in_batch = batch.filter(is_superseded=False).count()
    superseded = batch.filter(is_superseded=True).count()
    fell_back = (
        LlmJob.objects.filter(id__in=record.job_ids, status=LlmJob.Status.COMPLETED)
        .filter(current_model=FALLBACK_MODEL)
        .exclude(model=FALLBACK_MODEL)
        .count()
    )
    cancelled_streaming = (
        rows.filter(
            job_id__in=list(mix.cancels_asked),
            outcome=CostEntry.Outcome.CANCELLED,
        )
        .values("job_id")
        .distinct()
        .count()
    )
    dropped = sum(1 for call in record.billing if call.how == "dropped")
    refused_later = FailureRecord.objects.filter(
        job_id__in=record.job_ids, reason_code=CAPPED_REFUSAL
    ).count()
    refusals = sum(mix.refused.values()) + refused_later
    hung = AgentStep.objects.filter(
        run_id__in=record.agent_run_ids, kind=AgentStep.Kind.TOOL, name=HANG_TOOL
    ).count()
    needed = {
        "an answer from a provider batch": answered_in_batch,
        "a job completed on its fallback model": fell_back,
        "a stream cancelled while it streamed": cancelled_streaming,
        "a call cut mid-answer": dropped,
        "a budget's refusal": refusals,
    }
    if record.agent_run_ids:
        needed["a call of the hanging tool"] = hung
    missing = [what for what, n in needed.items() if not n]
    kinds = Counter(mix.kinds.values())
    figures = (
        ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        + f", {len(record.agent_run_ids)} agent runs; {answered_in_batch} answered in a batch, "
        f"{superseded} batch results superseded (moved to real time or cancelled), "
        f"{fell_back} completed on {FALLBACK_MODEL}, {len(mix.cancels_asked)} cancels while "
        f"running ({cancelled_streaming} booked cancelled, {mix.cancels_of_waiting} of jobs "
        f"waiting, {mix.cancels_missed} ended first), {dropped} calls cut, {refusals} refusals "
        f"({', '.join(f'{n} {kind}' for kind, n in sorted(mix.refused.items())) or 'none'} at "
        f"submit, {refused_later} {CAPPED_REFUSAL}); "
        + ("; ".join(mix.events) or "no extra kill or flush")
    )
    if missing:
        return Check(MIX_CHECKS[4], False, NOT_HAPPENED + ", ".join(missing) + ": " + figures)
    return Check(MIX_CHECKS[4], True, figures)


def ledger_against_bill(record: DrillRecord) -> list[Check]:
    """Tokens booked = tokens billed per model, and no job booked below its bill: the money
    checks of any drill that fills ``job_ids``, ``billing`` and ``provider_stats`` (the cluster
    drill's scenarios, chaos/cluster/checks.py)."""
    return [_tokens_per_model(record), _job_below_bill(record)]


def mix_checks(record: DrillRecord) -> list[Check]:
    jobs_final, *counters = job_checks(record, per_call=False)
    return [
        jobs_final,
        *agent_checks(record),
        _tokens_per_model(record),
        _job_below_bill(record),
        _limits_held(record),
        *budget_checks(record),
        *([_tool_effects(record)] if record.agent_run_ids else []),
        *counters,
        _ran_every_kind(record),
        *fault_checks(record),
    ]
