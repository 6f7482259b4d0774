"""Budgets: windows, usage, reservations and their settlement. The one place for budget rules.

- A budget's window is a UTC day or month. Its settled spend lives in a ``BudgetWindow`` row,
  updated in the same transaction as each ledger row (``budget_settle``, called by
  ``ledger/services.py``), so it always equals the ledger: every budget of the scope counts the
  row, enabled or not, so a budget enabled again holds what the ledger holds.
- Before each provider call the worker reserves the attempt's worst case, at today's price,
  against every enabled budget that applies (``budget_reserve``): the windows are locked in one
  order, and ``spent + open reservations + this one <= limit`` is checked under the locks, so no
  number of workers on any number of hosts can overshoot. The claim marks the reservation
  claimed, in its transaction, and fails if the reservation was released meanwhile
  (``budget_claim``). The ledger row of the attempt settles it, priced with the reservation's
  price (the upper bound for an unknown outcome, 0 for an error response); a copy that lost
  its claim releases its own reservation (``budget_release``), and the reconciler releases
  those whose copy never claimed and is gone (``budget_release_unclaimed``). Nothing else ends
  a reservation: no clock (DESIGN invariant 9).
- Alerts: one WARNING when a window's spend crosses ``soft_alert_percent``, one ERROR when the
  budget is exhausted, each once per window.
"""

import calendar
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import TYPE_CHECKING, Literal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from keys.selectors import api_key_ancestor_ids, api_key_lineage_ids
from ledger.config_cache import config_snapshot
from ledger.models import Budget, BudgetReservation, BudgetWindow, CostEntry, ModelPrice
from ledger.pricing import upper_bound_cost

if TYPE_CHECKING:
    from jobs.models import LlmJob

__all__ = [
    "BUDGET_ALERT_SEVERITIES",
    "BudgetRefusal",
    "BudgetUsage",
    "Reservation",
    "budget_claim",
    "budget_release",
    "budget_release_unclaimed",
    "budget_reserve",
    "budget_reserved_price",
    "budget_settle",
    "budget_usage",
    "budgets_exhausted_for",
    "budgets_for",
    "budgets_used_ratio",
    "window_bounds",
]

logger = logging.getLogger(__name__)

BUDGET_ALERT_SEVERITIES = {"soft": "WARNING", "exhausted": "ERROR"}
"""The severity of each budget alert. ERROR, not CRITICAL, for an exhausted budget: it is the cap
staff chose, working. The Prometheus rules use the same (tests/ops/test_alert_paths_agree.py)."""

RESERVATION_WAIT_SECONDS = 5.0
"""A job that would fit once the calls in flight settle waits this long (no attempt used)."""

NEVER = datetime(9999, 12, 31, tzinfo=UTC)
"""Written to ``BudgetReservation.expires_at``: the release before this one stopped counting a
reservation at that time, and must count it until it is settled while both run in a deploy."""

SWEEP_BATCH = 1000
"""Unclaimed reservations looked at per reconciler pass; the next pass goes on."""


def window_bounds(period: str, at: datetime | None = None) -> tuple[datetime, datetime]:
    """[start, end) of the UTC day or month that contains ``at``."""
    at = (at or timezone.now()).astimezone(UTC)
    if period == Budget.Period.DAY:
        start = at.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + timedelta(days=1)
    start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    days = calendar.monthrange(start.year, start.month)[1]
    return start, start + timedelta(days=days)


def budgets_for(
    *,
    feature: str,
    user_id: int | None,
    api_key_id: int | None = None,
    include_disabled: bool = False,
) -> list[Budget]:
    """The enabled budgets (every one, with ``include_disabled``) that apply to a job of this
    feature, user and API key, in id order: a key's budget, and the budgets of the keys that
    minted it. Read from this process's copy when it is current (ledger/config_cache.py); they
    are shared: never change them."""
    snapshot = config_snapshot()
    if snapshot is not None:
        return snapshot.budgets_for(feature, user_id, api_key_id, include_disabled=include_disabled)
    budgets = Budget.objects.all() if include_disabled else Budget.objects.filter(enabled=True)
    scope = Q(scope=Budget.Scope.FEATURE, feature=feature) | Q(
        scope=Budget.Scope.USER, user_id=user_id
    )
    if api_key_id is not None:
        keys = [api_key_id, *api_key_ancestor_ids(api_key_id)]
        scope |= Q(scope=Budget.Scope.KEY, api_key_id__in=keys)
    return list(budgets.filter(scope).select_related("user", "api_key").order_by("id"))


def _ledger_spend(budget: Budget, start: datetime, end: datetime) -> Decimal:
    entries = CostEntry.objects.filter(created_at__gte=start, created_at__lt=end)
    if budget.scope == Budget.Scope.FEATURE:
        entries = entries.filter(feature=budget.feature)
    elif budget.scope == Budget.Scope.KEY and budget.api_key_id is not None:
        entries = entries.filter(api_key_id__in=api_key_lineage_ids(budget.api_key_id))
    else:
        entries = entries.filter(user=budget.user)
    return entries.aggregate(total=Sum("cost_usd"))["total"] or Decimal(0)


def _window_ensure(budget: Budget, start: datetime, end: datetime) -> None:
    """Create the window's row, its spend read from the ledger (a budget created mid-window
    counts what was spent before it). In a short transaction of its own, like
    ``fingerprint_ensure``: a duplicate-key race ends at once and the loser reads the row."""
    if BudgetWindow.objects.filter(budget=budget, window_start=start).exists():
        return
    try:
        with transaction.atomic():
            BudgetWindow.objects.create(
                budget=budget, window_start=start, spent_usd=_ledger_spend(budget, start, end)
            )
    except IntegrityError:
        pass


def _reserved(budget: Budget, start: datetime) -> Decimal:
    # Every open reservation counts, however old: it ends by settlement or release only.
    return BudgetReservation.objects.filter(
        budget=budget, window_start=start, settled_at__isnull=True
    ).aggregate(total=Sum("amount_usd"))["total"] or Decimal(0)


@dataclass(frozen=True)
class BudgetUsage:
    budget: Budget
    window_start: datetime
    window_end: datetime
    spent_usd: Decimal
    reserved_usd: Decimal
    refused: bool = False
    """A job was refused for good in this window since the budget was last edited."""

    @property
    def remaining_usd(self) -> Decimal:
        return max(Decimal(0), self.budget.limit_usd - self.spent_usd - self.reserved_usd)

    @property
    def percent_used(self) -> Decimal:
        """Settled spend as a percentage of the limit (may pass 100 only through corrections)."""
        return (self.spent_usd * 100 / self.budget.limit_usd).quantize(Decimal("0.1"))

    @property
    def exhausted(self) -> bool:
        """Spent, or already unable to take a job's worst case: settled spend rarely reaches the
        limit exactly, because reservations stop at the worst case."""
        return self.refused or self.spent_usd >= self.budget.limit_usd


def _refused(budget: Budget, window: BudgetWindow | None) -> bool:
    # Staff raising the limit (or any edit) after the refusal gives the window a new chance.
    return bool(
        window is not None
        and window.exhausted_alerted_at is not None
        and budget.updated_at <= window.exhausted_alerted_at
    )


def budget_usage(*, budget: Budget, at: datetime | None = None) -> BudgetUsage:
    """Spent (settled) and reserved (open) in the window containing ``at``. Reads
    only: a window with no row yet is read from the ledger."""
    now = at or timezone.now()
    start, end = window_bounds(budget.period, now)
    window = BudgetWindow.objects.filter(budget=budget, window_start=start).first()
    spent = window.spent_usd if window else _ledger_spend(budget, start, end)
    reserved = _reserved(budget, start)
    return BudgetUsage(budget, start, end, spent, reserved, _refused(budget, window))


def budgets_used_ratio(*, at: datetime | None = None) -> dict[tuple[str, str], float]:
    """Settled spend / limit of every enabled budget in its current window, keyed by (scope,
    name) -- the feature slug or the username -- keeping the worst of a name's periods. Two
    queries whatever the number of budgets (the metrics scrape reads it)."""
    now = at or timezone.now()
    starts = {period: window_bounds(period, now)[0] for period in Budget.Period.values}
    budgets = list(Budget.objects.filter(enabled=True).select_related("user", "api_key"))
    spent = {
        (budget_id, start): amount
        for budget_id, start, amount in BudgetWindow.objects.filter(
            budget__in=budgets, window_start__in=set(starts.values())
        ).values_list("budget_id", "window_start", "spent_usd")
    }
    ratios: dict[tuple[str, str], float] = {}
    for budget in budgets:
        start = starts[budget.period]
        amount = spent.get((budget.id, start))
        if amount is None:  # no row yet: read from the ledger, as budget_usage does
            amount = _ledger_spend(budget, start, window_bounds(budget.period, now)[1])
        if budget.scope == Budget.Scope.FEATURE:
            name = budget.feature
        elif budget.scope == Budget.Scope.KEY:
            name = budget.key_label
        else:
            name = budget.user.username if budget.user else ""
        ratio = float(amount / budget.limit_usd) if budget.limit_usd > 0 else 1.0
        key = (budget.scope, name)
        ratios[key] = max(ratio, ratios.get(key, 0.0))
    return ratios


def budgets_exhausted_for(
    *, feature: str, user_id: int | None, api_key_id: int | None = None
) -> list[BudgetUsage]:
    """The budgets of this feature, user or key whose current window is already spent (submit
    check)."""
    budgets = budgets_for(feature=feature, user_id=user_id, api_key_id=api_key_id)
    return [usage for usage in (budget_usage(budget=b) for b in budgets) if usage.exhausted]


@dataclass(frozen=True)
class BudgetRefusal:
    """Why an attempt may not start now, and what to do with its job: a budget it does not fit
    (``usage``), or the job's own cap (``code`` ``max_cost_exceeded``, ``usage`` None)."""

    action: Literal["reject", "defer", "wait"]
    usage: BudgetUsage | None
    amount_usd: Decimal
    code: str = "budget_exceeded"
    cap_message: str = ""

    @property
    def retry_at(self) -> datetime:
        if self.action == "wait" or self.usage is None:
            wait = RESERVATION_WAIT_SECONDS * settings.LLM_RETRY_DELAY_SCALE
            return timezone.now() + timedelta(seconds=wait)
        return self.usage.window_end

    @property
    def message(self) -> str:
        if self.usage is None:
            return self.cap_message
        usage, budget = self.usage, self.usage.budget
        head = (
            f"Budget {budget.name} ({budget.period}, ${budget.limit_usd}) cannot take this "
            f"attempt's worst case ${self.amount_usd}: spent ${usage.spent_usd}, "
            f"reserved ${usage.reserved_usd}"
        )
        if self.action == "wait":
            return f"{head}; waiting for the calls in flight to settle."
        if self.action == "defer":
            return f"{head}; held until the window resets at {usage.window_end.isoformat()}."
        return f"{head}."


@dataclass(frozen=True)
class Reservation:
    """What ``budget_reserve`` held for one attempt, by one copy of its job. The claim takes it
    (``job_claim(reservation=...)``); a copy that does not send the call releases it."""

    token: uuid.UUID | None
    """Shared by its rows; None when no budget applied (nothing is held)."""
    rows: int = 0
    amount_usd: Decimal = Decimal(0)
    price: ModelPrice | None = None
    """The price the attempt is reserved, and so booked, at (``jobs.JobAttempt.price``)."""


def budget_reserve(
    *, job: "LlmJob", attempt: int, batch: bool = False
) -> BudgetRefusal | Reservation:
    """Reserve this attempt's worst case at today's price against every budget that applies,
    all or none. ``batch``: an item of a provider message batch, at the batch rate.

    Returns the ``Reservation`` (its ``token`` None when no budget applies), else the refusal of
    the first budget it does not fit: ``wait`` when it would fit once the calls in flight
    settle, else the budget's ``on_exceed`` (``reject`` or ``defer``).
    """
    from ledger.selectors import price_for_model  # imports alerts, which imports this module

    budgets = budgets_for(feature=job.feature, user_id=job.user_id, api_key_id=job.api_key_id)
    # The price of the model that will run (a fallback's, once the job moved): the attempt is
    # reserved, capped and booked at it.
    price = price_for_model(model=job.run_model)
    if not budgets and job.max_cost_usd is None:
        return Reservation(token=None, price=price)
    amount = Decimal(0)
    if price is not None:
        amount = upper_bound_cost(
            price,
            messages=job.request_messages,
            system=job.system,
            max_tokens=job.max_tokens,
            tools=(job.params or {}).get("tools"),
        )
        if batch:
            amount = (amount * (Decimal(1) - price.batch_discount)).quantize(
                Decimal("0.000001"), rounding=ROUND_CEILING
            )
    if job.max_cost_usd is not None and job.cost_usd + amount > job.max_cost_usd:
        return BudgetRefusal(
            "reject",
            None,
            amount,
            code="max_cost_exceeded",
            cap_message=(
                f"The next attempt on {job.run_model} could cost up to ${amount}, and the job has "
                f"cost ${job.cost_usd} of its max_cost_usd ${job.max_cost_usd}: not sent."
            ),
        )
    if not budgets:
        return Reservation(token=None, price=price)
    now = timezone.now()
    bounds = {b.id: window_bounds(b.period, now) for b in budgets}
    for budget in budgets:
        _window_ensure(budget, *bounds[budget.id])
    with transaction.atomic():
        # One lock order for every worker, the budget's id (one window each here), the order
        # ``budget_settle`` updates windows in: concurrent reservers queue, and a reservation
        # never deadlocks with a settlement (the window ids of two budgets need not follow
        # their budgets' order).
        windows = {
            w.budget_id: w
            for w in BudgetWindow.objects.select_for_update()
            .filter(
                Q(
                    *[Q(budget_id=b.id, window_start=bounds[b.id][0]) for b in budgets],
                    _connector=Q.OR,
                )
            )
            .order_by("budget_id")
        }
        # A reservation of this very attempt that no copy claimed holds nothing any more: its
        # copy released it when its claim lost, or died before the claim, or is about to claim
        # and now cannot (a claim needs its own reservation open, ``budget_claim``), since an
        # attempt number is used again only when that attempt never started. Without this the
        # job waited on itself (the chaos drill found it, chaos/).
        BudgetReservation.objects.filter(
            job=job,
            attempt=attempt,
            claimed_at__isnull=True,
            budget_id__in=[budget.id for budget in budgets],
        ).delete()
        for budget in budgets:
            start, end = bounds[budget.id]
            window = windows[budget.id]
            usage = BudgetUsage(budget, start, end, window.spent_usd, _reserved(budget, start))
            if usage.spent_usd + usage.reserved_usd + amount <= budget.limit_usd:
                continue
            if usage.spent_usd + amount <= budget.limit_usd:
                action: Literal["reject", "defer", "wait"] = "wait"
            else:
                action = "defer" if budget.on_exceed == Budget.OnExceed.DEFER else "reject"
                _alert_exhausted_once(window, usage)
            return BudgetRefusal(action, usage, amount)
        token = uuid.uuid4()
        BudgetReservation.objects.bulk_create(
            [
                BudgetReservation(
                    budget=budget,
                    window_start=bounds[budget.id][0],
                    job=job,
                    attempt=attempt,
                    token=token,
                    amount_usd=amount,
                    price=price,
                    expires_at=NEVER,
                )
                for budget in budgets
            ]
        )
    return Reservation(token=token, rows=len(budgets), amount_usd=amount, price=price)


def budget_claim(*, reservation: Reservation) -> bool:
    """Mark the reservation claimed, inside the transaction of the claim that starts its
    attempt. False when any of its rows was released meanwhile (by the reconciler's sweep or a
    newer copy's reserve): the caller must roll its claim back, or the call would go out with
    nothing held. Both sides are conditional updates of the same rows, so exactly one wins."""
    if reservation.token is None:
        return True
    claimed = BudgetReservation.objects.filter(
        token=reservation.token, settled_at__isnull=True, claimed_at__isnull=True
    ).update(claimed_at=timezone.now())
    return claimed == reservation.rows


def budget_release(*, reservation: Reservation) -> None:
    """Drop a reservation whose call will not be sent (its copy lost the claim). Only this
    reservation's own rows, and never claimed ones: a claimed reservation belongs to the
    attempt in flight and ends with its ledger row."""
    if reservation.token is None:
        return
    BudgetReservation.objects.filter(
        token=reservation.token, settled_at__isnull=True, claimed_at__isnull=True
    ).update(settled_at=timezone.now(), settled_usd=Decimal(0))


def budget_release_unclaimed() -> int:
    """Release the open reservations no copy claimed, older than ``LLM_STALE_AFTER_SECONDS``,
    whose attempt is not running (the reconciler's pass). Their copy died between reserve and
    claim, or lost its claim and died before releasing: the call was never sent. A live copy
    that is merely slow loses nothing but time: its claim then fails (``budget_claim``) and the
    job is enqueued again. A row of an attempt that is running (a losing copy's, or a legacy
    row, which carried no claim mark) waits for that attempt to end. Returns how many rows."""
    from jobs.models import LlmJob  # jobs imports the ledger

    cutoff = timezone.now() - timedelta(seconds=settings.LLM_STALE_AFTER_SECONDS)
    rows = list(
        BudgetReservation.objects.filter(
            settled_at__isnull=True, claimed_at__isnull=True, created_at__lt=cutoff
        ).values_list("id", "job_id", "attempt")[:SWEEP_BATCH]
    )
    if not rows:
        return 0
    running = dict(
        LlmJob.objects.filter(
            id__in={job_id for _, job_id, _ in rows}, status=LlmJob.Status.RUNNING
        ).values_list("id", "attempts")
    )
    released = 0
    now = timezone.now()
    for reservation_id, job_id, attempt in rows:
        if running.get(job_id) == attempt:
            continue
        released += BudgetReservation.objects.filter(
            id=reservation_id, settled_at__isnull=True, claimed_at__isnull=True
        ).update(settled_at=now, settled_usd=Decimal(0))
    if released:
        logger.warning("released %s budget reservations no worker claimed", released)
    return released


def budget_reserved_price(*, job: "LlmJob", attempt: int) -> ModelPrice | None:
    """The price this attempt's claimed reservation was computed with (None without one): the
    attempt is booked with it, so a price edited during the call cannot pass what was held."""
    reservation = (
        BudgetReservation.objects.filter(
            job=job, attempt=attempt, claimed_at__isnull=False, price__isnull=False
        )
        .select_related("price")
        .order_by("id")
        .first()
    )
    return reservation.price if reservation else None


def budget_settle(*, entry: CostEntry, job: "LlmJob", reserved: bool = True) -> None:
    """Book a ledger row into the budget windows it belongs to. Called by ``ledger/services.py``
    inside the transaction that writes the row, so windows always equal the ledger.

    The attempt's claimed reservations (and legacy rows, which carried no claim mark) are
    settled to the row's cost, in the windows they were taken in; a row with no reservation (a
    correction, or a budget created while the call was out) counts in the window its attempt's
    reservation was in, or else the current one. Every budget of the scope counts it, enabled
    or not: a window equals the ledger whatever happened to ``enabled``.

    ``reserved`` False: the attempt's claim took none (its ``JobAttempt`` has no token), and
    only a claim makes a claimed reservation (legacy rows, no token, predate ``JobAttempt``).
    """
    now = timezone.now()
    touched: set[tuple[int, datetime]] = set()
    # A priced tool call holds no reservation (its ``attempt`` numbers the turn's calls, not
    # the job's attempts): it counts in the current windows.
    reservations = (
        []
        if entry.entry_type == CostEntry.EntryType.TOOL_CALL or not reserved
        else list(
            BudgetReservation.objects.filter(job=job, attempt=entry.attempt)
            .filter(Q(claimed_at__isnull=False) | Q(token__isnull=True))
            .order_by("budget_id")
        )
    )
    by_budget = {r.budget_id: r for r in reservations}
    for reservation in reservations:
        if reservation.settled_at is None and entry.entry_type == CostEntry.EntryType.ATTEMPT:
            BudgetReservation.objects.filter(id=reservation.id, settled_at__isnull=True).update(
                settled_at=now, settled_usd=entry.cost_usd
            )
    scope = budgets_for(
        feature=entry.feature,
        user_id=entry.user_id,
        api_key_id=entry.api_key_id,
        include_disabled=True,
    )
    for budget in scope:
        held = by_budget.get(budget.id)
        start, end = window_bounds(budget.period, held.window_start if held else now)
        windows = BudgetWindow.objects.filter(budget=budget, window_start=start)
        if not entry.cost_usd:
            continue
        if not windows.update(spent_usd=F("spent_usd") + entry.cost_usd):
            # The window's first spend: its row starts from the ledger, this row included (the
            # same transaction wrote it). A concurrent creator wins the key: add to its row.
            try:
                with transaction.atomic():
                    BudgetWindow.objects.create(
                        budget=budget,
                        window_start=start,
                        spent_usd=_ledger_spend(budget, start, end),
                    )
            except IntegrityError:
                windows.update(spent_usd=F("spent_usd") + entry.cost_usd)
        if budget.enabled:  # a disabled budget keeps count but sends no alert
            touched.add((budget.id, start))
    for budget_id, start in sorted(touched):
        window = BudgetWindow.objects.select_related(
            "budget", "budget__user", "budget__api_key"
        ).get(budget_id=budget_id, window_start=start)
        _alert_thresholds_once(window)


def _alert_thresholds_once(window: BudgetWindow) -> None:
    budget = window.budget
    start, end = window_bounds(budget.period, window.window_start)
    usage = BudgetUsage(budget, start, end, window.spent_usd, Decimal(0))
    if usage.exhausted:
        _alert_exhausted_once(window, usage)
    elif window.spent_usd * 100 >= budget.limit_usd * budget.soft_alert_percent:
        _alert_soft_once(window, usage)


def _alert_soft_once(window: BudgetWindow, usage: BudgetUsage) -> None:
    if not BudgetWindow.objects.filter(id=window.id, soft_alerted_at__isnull=True).update(
        soft_alerted_at=timezone.now()
    ):
        return
    budget = usage.budget
    _alert(
        kind="soft",
        severity=BUDGET_ALERT_SEVERITIES["soft"],
        usage=usage,
        title=(
            f"Budget {budget.name} at {usage.percent_used}% of ${budget.limit_usd} "
            f"this {budget.period}"
        ),
        body=(
            f"Spend ${usage.spent_usd} has crossed {budget.soft_alert_percent}% of the "
            f"{budget.period} limit ${budget.limit_usd}; the window resets at "
            f"{usage.window_end.isoformat()}."
        ),
    )


def _alert_exhausted_once(window: BudgetWindow, usage: BudgetUsage) -> None:
    if not BudgetWindow.objects.filter(id=window.id, exhausted_alerted_at__isnull=True).update(
        exhausted_alerted_at=timezone.now()
    ):
        return
    budget = usage.budget
    action = "held until the reset" if budget.on_exceed == Budget.OnExceed.DEFER else "rejected"
    _alert(
        kind="exhausted",
        severity=BUDGET_ALERT_SEVERITIES["exhausted"],
        usage=usage,
        title=f"Budget {budget.name} exhausted: ${usage.spent_usd} of ${budget.limit_usd}",
        body=(
            f"The {budget.period} budget {budget.name} (${budget.limit_usd}) cannot take more "
            f"calls: spent ${usage.spent_usd}, reserved ${usage.reserved_usd}. Jobs are "
            f"{action}; the window resets at {usage.window_end.isoformat()}."
        ),
    )


def _alert(*, kind: str, severity: str, usage: BudgetUsage, title: str, body: str) -> None:
    # Imported here: alerts imports the jobs and ledger apps.
    from alerts.destinations import destinations_for
    from alerts.notifications import alert_create

    budget = usage.budget
    alert_create(
        fingerprint=f"budget_{kind}:{budget.id}:{usage.window_start:%Y-%m-%d}",
        severity=severity,
        action="trigger",
        source="budget",
        title=title,
        body=body,
        details={
            "budget_id": budget.id,
            "budget": budget.name,
            "period": budget.period,
            "limit_usd": str(budget.limit_usd),
            "spent_usd": str(usage.spent_usd),
            "reserved_usd": str(usage.reserved_usd),
            "window_start": usage.window_start.isoformat(),
            "window_end": usage.window_end.isoformat(),
        },
        destinations=destinations_for(severity=severity),
    )
    logger.warning("budget %s: %s alert (%s)", budget.name, kind, title)
