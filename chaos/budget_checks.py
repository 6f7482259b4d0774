"""The drill's checks on budgets: the promises "settled spend never passes a hard limit" and
"a budget's window equals the ledger for its scope and period, whatever happened to enabled".

- no window above its limit at any look: the drill looks at every budget of its own every two
  seconds during the load and the drain, and once more at the end; with the ``budget`` fault,
  the capped budget (one feature, a sixth of its jobs' worst cases) must have refused jobs, or
  nothing was tested;
- window = ledger for every budget, no reservation left open; with the ``budget`` fault, spend
  must have been booked while the drill's budget was disabled, or the fault did not happen.
"""

from decimal import Decimal

from django.db.models import Count, Q, Sum

from chaos import events
from chaos.checks import Check
from chaos.record import DrillRecord
from chaos.setup import CAPPED_FEATURE
from dlq.models import FailureRecord
from jobs.models import LlmJob
from keys.selectors import api_key_lineage_ids
from ledger.budgets import window_bounds
from ledger.models import Budget, BudgetReservation, BudgetWindow, CostEntry

__all__ = ["CAPPED_REFUSAL", "budget_checks", "scope_filter"]

CAPPED_REFUSAL = "budget_exceeded"
"""The reason code of a job its budget refused (jobs/retry_policy.py)."""


def _usd(amount: Decimal) -> str:
    return f"${amount:.6f}"


def _budget_ids(record: DrillRecord) -> list[int]:
    return record.budget_ids()


def scope_filter(budget: Budget) -> Q:
    """The ledger rows (or jobs: both have these fields) a budget holds: its feature's, its
    user's, or its key's and those of every key it minted (keys/selectors.py)."""
    if budget.scope == Budget.Scope.FEATURE:
        return Q(feature=budget.feature)
    if budget.scope == Budget.Scope.KEY and budget.api_key_id is not None:
        return Q(api_key_id__in=api_key_lineage_ids(budget.api_key_id))
    return Q(user_id=budget.user_id)


def _below_limit(record: DrillRecord) -> Check:
    name = "no budget window above its limit at any look"
    above, now = events.budget_windows_above_limit(budget_ids=_budget_ids(record))
    looks = record.budget_looks
    seen = [*looks.above, *above]
    capped = record.capped_budget_id
    if not record.options.has("budget"):
        return Check(
            name,
            not seen,
            f"{len(seen)} looks above a limit in {looks.looks + 1} looks"
            + (f" (e.g. {seen[0]})" if seen else ""),
        )
    if capped is None:
        return Check(name, False, "fault did not happen: no capped budget was set up")
    capped_jobs = list(
        LlmJob.objects.filter(id__in=record.job_ids, feature=CAPPED_FEATURE).values_list(
            "id", flat=True
        )
    )
    refused = FailureRecord.objects.filter(
        job_id__in=capped_jobs, reason_code=CAPPED_REFUSAL
    ).count()
    spent, limit = looks.highest.get(capped, now.get(capped, ("0", "?")))
    figures = (
        f"{len(seen)} looks above a limit in {looks.looks + 1} looks at {len(_budget_ids(record))} "
        f"budgets; capped budget at most ${spent} of ${limit}, {refused} of its "
        f"{len(capped_jobs)} jobs refused"
    )
    if seen:
        figures += f" (e.g. {seen[0]})"
    refused_at_submit = record.refused_at_submit
    figures += f", {refused_at_submit} more refused at submit"
    if not refused and not refused_at_submit:
        return Check(
            name,
            False,
            "fault did not happen: the capped budget refused no job, its limit was never "
            "reached; " + figures,
        )
    return Check(name, not seen, figures)


def _window_equals_ledger(record: DrillRecord) -> Check:
    name = "window = ledger for every budget"
    parts, passed = [], True
    for budget in Budget.objects.filter(id__in=_budget_ids(record)).order_by("id"):
        start, end = window_bounds(budget.period)
        window = BudgetWindow.objects.filter(budget=budget, window_start=start).first()
        if window is None:
            # Nothing was ever reserved against it: its window, once made, reads the ledger.
            parts.append(f"budget {budget.id} ({budget.name}): no window (never reserved)")
            continue
        spent = window.spent_usd
        ledger = CostEntry.objects.filter(
            scope_filter(budget), created_at__gte=start, created_at__lt=end
        ).aggregate(total=Sum("cost_usd"))["total"] or Decimal(0)
        open_reservations = BudgetReservation.objects.filter(budget=budget, settled_at=None).count()
        ok = spent == ledger and open_reservations == 0
        passed = passed and ok
        parts.append(
            f"budget {budget.id} ({budget.name}): window {_usd(spent)} "
            f"{'=' if spent == ledger else '!='} ledger {_usd(ledger)}, "
            f"{open_reservations} reservations left open"
        )
    figures = "; ".join(parts) or "no budget of the drill's was found"
    if not record.options.has("budget"):
        return Check(name, passed, figures)
    event = record.budget_toggle
    if event is None or event.enabled_wall is None:
        return Check(name, False, "fault did not happen: the budget was never disabled and "
                     "enabled again; " + figures)  # fmt: skip
    booked = CostEntry.objects.filter(
        job_id__in=record.job_ids,
        created_at__gte=event.disabled_wall,
        created_at__lt=event.enabled_wall,
    ).aggregate(total=Sum("cost_usd"), rows=Count("id"))
    rows = booked["rows"] or 0
    toggled = (
        f"; {rows} ledger rows ({_usd(booked['total'] or Decimal(0))}) booked while budget "
        f"{event.budget_id} was disabled ({event.disabled_at:.0f}-{event.enabled_at:.0f} s)"
    )
    if not rows:
        return Check(
            name,
            False,
            "fault did not happen: nothing was booked while the budget was disabled; "
            + figures
            + toggled,
        )
    return Check(name, passed, figures + toggled)


def budget_checks(record: DrillRecord) -> list[Check]:
    return [_below_limit(record), _window_equals_ledger(record)]
