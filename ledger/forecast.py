"""Budget forecasts: how fast a budget burns, where it ends its window, and when it runs out.

The rule, kept in one pure function (``forecast_from_spend``) so it can be checked by hand:

- **Burn rate** is the settled spend (ledger rows: real costs, and upper-bound estimates for
  unknown outcomes) of the budget's scope over the last ``LEDGER_FORECAST_WINDOW_HOURS`` hours
  (default 24), divided by those hours. For a day budget the look-back never starts before the
  day does: it is ``min(hours elapsed today, LEDGER_FORECAST_WINDOW_HOURS)``, so yesterday's
  traffic does not set today's pace. A month budget looks back the full window, across the start
  of the month if need be: one day of history is a steadier rate than the first hours of a month.
  Open reservations (calls in flight) are not spend yet and do not count.
- **Projected spend at window end** = spent now + rate x hours left in the window. Linear on
  purpose: a budget is a ceiling, and a straight line from the recent past is easy to explain and
  to check; it is an estimate, not a promise (a quiet night lowers it, a burst raises it).
- **Projected exhaustion** = now + (limit - spent) / rate, reported only if it falls before the
  window ends (the budget resets then). No spend in the look-back (rate 0) means no exhaustion;
  a budget already at its limit is exhausted now.

``budget_forecast`` is the selector: it reads the budget's usage and its recent ledger spend (the
``(feature, created_at)`` / ``(user, created_at)`` indexes) and applies the rule.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db.models import Q, Sum
from django.utils import timezone

from keys.selectors import api_key_lineage_ids
from ledger.budgets import BudgetUsage, budget_usage
from ledger.models import Budget, CostEntry

__all__ = [
    "BudgetStatus",
    "Forecast",
    "budget_forecast",
    "budget_status",
    "budget_statuses",
    "forecast_from_spend",
    "lookback_hours_for",
]

MICRODOLLAR = Decimal("0.000001")
"""Money is reported to the ledger's own precision (6 decimal places)."""

SECONDS_PER_HOUR = Decimal(3600)


@dataclass(frozen=True)
class Forecast:
    burn_rate_usd_per_hour: Decimal
    projected_spend_usd: Decimal
    projected_exhaustion_at: datetime | None
    lookback_hours: Decimal
    """The recent window the rate was measured over (0: nothing to measure yet)."""


def _hours(delta: timedelta) -> Decimal:
    return Decimal(str(delta.total_seconds())) / SECONDS_PER_HOUR


def forecast_from_spend(
    *,
    spent_usd: Decimal,
    limit_usd: Decimal,
    recent_spend_usd: Decimal,
    lookback_hours: Decimal,
    now: datetime,
    window_end: datetime,
) -> Forecast:
    """The forecast from plain numbers: no database, so a test can compute it by hand.

    Example: $3 spent, $1.50 of it in the last 3 hours (0.5 $/h), 18 hours left, limit $10:
    projected $3 + 0.5 x 18 = $12 at the window's end, exhausted 14 hours from now.
    """
    if lookback_hours > 0:
        rate = recent_spend_usd / lookback_hours
    else:
        rate = Decimal(0)
    hours_left = max(Decimal(0), _hours(window_end - now))
    projected = spent_usd + rate * hours_left
    exhaustion: datetime | None = None
    if spent_usd >= limit_usd:
        exhaustion = now
    elif rate > 0:
        seconds = ((limit_usd - spent_usd) / rate * SECONDS_PER_HOUR).to_integral_value(
            rounding=ROUND_HALF_UP
        )
        at = now + timedelta(seconds=int(seconds))
        exhaustion = at if at < window_end else None
    return Forecast(
        burn_rate_usd_per_hour=rate.quantize(MICRODOLLAR, rounding=ROUND_HALF_UP),
        projected_spend_usd=projected.quantize(MICRODOLLAR, rounding=ROUND_HALF_UP),
        projected_exhaustion_at=exhaustion,
        lookback_hours=lookback_hours,
    )


def lookback_hours_for(*, budget: Budget, window_start: datetime, now: datetime) -> Decimal:
    """Hours of recent ledger the rate is measured over (see the module docstring)."""
    hours = Decimal(str(settings.LEDGER_FORECAST_WINDOW_HOURS))
    if budget.period == Budget.Period.DAY:
        hours = min(hours, max(Decimal(0), _hours(now - window_start)))
    return hours


def _scope_spend(budget: Budget, start: datetime, end: datetime) -> Decimal:
    if budget.scope == Budget.Scope.FEATURE:
        scope = Q(feature=budget.feature)
    elif budget.scope == Budget.Scope.KEY and budget.api_key_id is not None:
        scope = Q(api_key_id__in=api_key_lineage_ids(budget.api_key_id))
    else:
        scope = Q(user_id=budget.user_id)
    entries = CostEntry.objects.filter(scope, created_at__gte=start, created_at__lte=end)
    return entries.aggregate(total=Sum("cost_usd"))["total"] or Decimal(0)


def budget_forecast(
    *, budget: Budget, at: datetime | None = None, usage: BudgetUsage | None = None
) -> Forecast:
    """The forecast of ``budget`` at ``at`` (default now). Pass ``usage`` when already read for
    the same moment, to save its queries."""
    now = at or timezone.now()
    usage = usage or budget_usage(budget=budget, at=now)
    lookback = lookback_hours_for(budget=budget, window_start=usage.window_start, now=now)
    recent = Decimal(0)
    if lookback > 0:
        recent = _scope_spend(budget, now - timedelta(hours=float(lookback)), now)
    return forecast_from_spend(
        spent_usd=usage.spent_usd,
        limit_usd=budget.limit_usd,
        recent_spend_usd=recent,
        lookback_hours=lookback,
        now=now,
        window_end=usage.window_end,
    )


@dataclass(frozen=True)
class BudgetStatus:
    """A budget's current window and its forecast, read once for the admin and the API."""

    budget: Budget
    usage: BudgetUsage
    forecast: Forecast


def budget_status(*, budget: Budget, at: datetime | None = None) -> BudgetStatus:
    """Usage and forecast of one budget: three or four queries."""
    now = at or timezone.now()
    usage = budget_usage(budget=budget, at=now)
    return BudgetStatus(budget, usage, budget_forecast(budget=budget, at=now, usage=usage))


def budget_statuses(*, budgets: Iterable[Budget], at: datetime | None = None) -> list[BudgetStatus]:
    """Every budget's status at one moment (a few queries per budget; budgets are tens)."""
    now = at or timezone.now()
    return [budget_status(budget=budget, at=now) for budget in budgets]
