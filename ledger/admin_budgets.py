"""The Budget admin: where staff set per-feature and per-user budgets and watch them hold.

Each list row shows its current window (spent, reserved, remaining, a bar) and the forecast
(ledger/forecast.py). A row's status is read once and kept on the row object, so the columns of
one row share a few queries instead of costing a few each.
"""

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import NON_FIELD_ERRORS
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ledger.forecast import BudgetStatus, budget_status
from ledger.models import Budget

BAR_COLOURS = {"ok": "#417690", "soft": "#d98e04", "exhausted": "#ba2121"}
"""Admin blue below the soft alert, amber from it, red at the limit (the admin's error red)."""

_STATUS_ATTRIBUTE = "_budget_status"


def status_of(budget: Budget) -> BudgetStatus:
    """The budget's status, read on first use and kept on this object for the other columns."""
    status = getattr(budget, _STATUS_ATTRIBUTE, None)
    if status is None:
        status = budget_status(budget=budget)
        setattr(budget, _STATUS_ATTRIBUTE, status)
    return status


def money(amount: Decimal) -> str:
    """Exact, but short: cents always, further decimals only when they are not zero
    ($1.70, $0.00125), so eight money columns fit a list row."""
    text = f"{amount:.6f}".rstrip("0")
    whole, _, decimals = text.partition(".")
    return f"${whole}.{decimals.ljust(2, '0')}"


def bar_level(*, percent_used: Decimal, soft_alert_percent: int) -> str:
    if percent_used >= 100:
        return "exhausted"
    if percent_used >= soft_alert_percent:
        return "soft"
    return "ok"


SCOPE_CONSTRAINT = "budget_scope_is_consistent_with_keys"


class BudgetAdminForm(forms.ModelForm):
    """Budget.clean() explains a scope mismatch in words; the database check constraint behind
    it would repeat the same problem as "Constraint ... is violated": show the words only."""

    class Meta:
        model = Budget
        fields = [
            "scope",
            "feature",
            "user",
            "api_key",
            "period",
            "limit_usd",
            "soft_alert_percent",
            "on_exceed",
            "enabled",
        ]
        labels = {"limit_usd": "Limit (USD)"}

    def _post_clean(self) -> None:  # type: ignore[misc]  # ModelForm's model validation step
        super()._post_clean()  # type: ignore[misc]
        errors = self.errors.get(NON_FIELD_ERRORS)
        if errors is not None and len(errors) > 1:
            errors.data = [e for e in errors.data if SCOPE_CONSTRAINT not in str(e)]


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    form = BudgetAdminForm
    # Seven columns beside the sidebar and the filters at 1,400 px: the period sits under the
    # limit, reservations under the spend, what is left under the bar; the change page and the
    # API show each on its own.
    list_display = [
        "budget_name",
        "limit_per_period",
        "spent_so_far",
        "used",
        "forecast",
        "when_exceeded",
        "enabled",
    ]
    list_display_links = ["budget_name"]
    list_editable = ["enabled"]
    list_filter = ["scope", "period", "enabled"]
    list_select_related = ["user", "api_key"]
    search_fields = ["feature", "user__username", "api_key__name", "api_key__prefix"]
    autocomplete_fields = ["user", "api_key"]
    readonly_fields = ["spent", "reserved", "remaining", "percent_used", "forecast"]
    fieldsets = [
        (
            "What it limits",
            {
                "fields": ["scope", "feature", "user", "api_key"],
                "description": (
                    "A feature budget names a feature (and no user); a user budget names a user "
                    "(and no feature); a key budget names an API key (its max_budget_usd, one "
                    "per key). A job counts against every enabled budget of its feature, of its "
                    "owner and of the key that submitted it."
                ),
            },
        ),
        (
            "Limit",
            {
                "fields": ["period", "limit_usd", "soft_alert_percent", "on_exceed", "enabled"],
                "description": (
                    "Windows are UTC days or months. Reject dead-letters a job that does not "
                    "fit; defer holds it until the window resets."
                ),
            },
        ),
    ]

    def get_fieldsets(self, request: HttpRequest, obj: Budget | None = None) -> Any:
        fieldsets = list(super().get_fieldsets(request, obj))
        if obj is not None:
            fieldsets.append(
                (
                    "Current window",
                    {"fields": ["spent", "reserved", "remaining", "percent_used", "forecast"]},
                )
            )
        return fieldsets

    @admin.display(description="budget", ordering="feature")
    def budget_name(self, budget: Budget) -> SafeString:
        # One line; a name past the column's width ends in an ellipsis, whole in its tooltip.
        return format_html(
            '<span class="budget-name" title="{}">{}</span>', budget.name, budget.name
        )

    @admin.display(description="limit", ordering="limit_usd")
    def limit_per_period(self, budget: Budget) -> SafeString:
        # "day" or "month": the labels' "(UTC)" is in the form's help.
        return format_html(
            '{}<span class="budget-sub">a {}</span>', money(budget.limit_usd), budget.period
        )

    @admin.display(description="spent")
    def spent_so_far(self, budget: Budget) -> SafeString:
        reserved = status_of(budget).usage.reserved_usd
        held = (
            format_html('<span class="budget-sub">+{} reserved</span>', money(reserved))
            if reserved
            else ""
        )
        return format_html("{}{}", self.spent(budget), held)

    @admin.display(description="used")
    def used(self, budget: Budget) -> SafeString:
        left = money(status_of(budget).usage.remaining_usd)
        return format_html(
            '{}<span class="budget-sub">{} left</span>', self.percent_used(budget), left
        )

    @admin.display(description="limit", ordering="limit_usd")
    def limit(self, budget: Budget) -> str:
        return money(budget.limit_usd)

    @admin.display(description="spent")
    def spent(self, budget: Budget) -> str:
        return money(status_of(budget).usage.spent_usd)

    @admin.display(description="reserved")
    def reserved(self, budget: Budget) -> str:
        return money(status_of(budget).usage.reserved_usd)

    @admin.display(description="remaining")
    def remaining(self, budget: Budget) -> str:
        return money(status_of(budget).usage.remaining_usd)

    @admin.display(description="used")
    def percent_used(self, budget: Budget) -> SafeString:
        usage = status_of(budget).usage
        percent = usage.percent_used
        level = bar_level(percent_used=percent, soft_alert_percent=budget.soft_alert_percent)
        width = min(Decimal(100), max(Decimal(0), percent))
        return format_html(
            '<span style="white-space:nowrap" title="{}% of {} used, soft alert at {}%">'
            '<span class="budget-bar budget-bar-{}" style="display:inline-block;'
            "vertical-align:middle;width:60px;height:10px;background:#e0e0e0;"
            'border-radius:3px;overflow:hidden;margin-right:6px">'
            '<span style="display:block;width:{}%;height:100%;background:{}"></span></span>'
            '<span class="budget-percent">{}%</span></span>',
            percent,
            money(budget.limit_usd),
            budget.soft_alert_percent,
            level,
            width,
            BAR_COLOURS[level],
            percent,
        )

    @admin.display(description="on exceed", ordering="on_exceed")
    def when_exceeded(self, budget: Budget) -> str:
        # The value ("reject", "defer"): the choice labels are sentences, too wide for a column.
        return budget.on_exceed

    @admin.display(description="forecast")
    def forecast(self, budget: Budget) -> SafeString:
        status = status_of(budget)
        forecast = status.forecast
        if status.usage.exhausted:
            exhaustion = "exhausted"
        elif forecast.projected_exhaustion_at is None:
            exhaustion = "—"
        else:
            exhaustion = f"out {forecast.projected_exhaustion_at:%b %d %H:%M}"
        projected = forecast.projected_spend_usd
        if projected >= 1:
            # An estimate: cents are precision enough once it reaches dollars.
            projected = projected.quantize(Decimal("0.01"))
        return format_html(
            '<span class="budget-forecast" title="Projected spend at the end of the window '
            "and when the limit runs out (UTC), at the burn rate of {} per hour over the last "
            '{} h"><span style="white-space:nowrap">{} at end</span><br>'
            '<span style="white-space:nowrap">{}</span></span>',
            money(forecast.burn_rate_usd_per_hour),
            forecast.lookback_hours.quantize(Decimal("0.1")),
            money(projected),
            exhaustion,
        )
