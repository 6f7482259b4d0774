"""List filters and intermediate-page forms of the DLQ console."""

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import SEARCH_VAR
from django.db.models import Case, OrderBy, Value, When
from django.utils import timezone

from dlq.models import FailureRecord
from ledger.models import ModelPrice

__all__ = [
    "OPEN_FIRST",
    "AgeFilter",
    "AttemptsFilter",
    "CommentForm",
    "CostFilter",
    "ModelChoiceForm",
    "StateFilter",
]

OPEN_FIRST: list[OrderBy | str] = [
    Case(When(state=FailureRecord.State.OPEN, then=Value(0)), default=Value(1)).asc(),
    "-created_at",
    "-id",
]
"""The list's order: the open records (what still needs someone) first, each part newest first."""


class StateFilter(admin.SimpleListFilter):
    """Open unless a state is named: the list opens on what still needs someone. Every choice,
    Open too, names its state in its link, so it survives the other filters; ``all`` shows
    every state (open first, ``OPEN_FIRST``). A search (``?q=``: a job or request id another
    page links to) looks in every state unless one is named, and so does an action on rows
    picked by id: one requeued meanwhile is reported as already handled, not as not selected."""

    title = "state"
    # The parameter of the field filter this replaces: links that name a state keep working.
    parameter_name = "state__exact"
    ALL = "all"

    def __init__(self, request, params, model, model_admin):  # type: ignore[no-untyped-def]
        super().__init__(request, params, model, model_admin)
        picked = ACTION_CHECKBOX_NAME in request.POST and request.POST.get("select_across") != "1"
        self.any_state = bool(request.GET.get(SEARCH_VAR)) or (request.method == "POST" and picked)

    def lookups(self, request, model_admin):  # type: ignore[no-untyped-def]
        return [*FailureRecord.State.choices, (self.ALL, "All")]

    def value(self) -> str:
        asked = super().value()
        if asked:
            return str(asked)
        return self.ALL if self.any_state else FailureRecord.State.OPEN

    def queryset(self, request, queryset):  # type: ignore[no-untyped-def]
        # An unknown state matches no record (a field filter would answer with an error page).
        value = self.value()
        return queryset if value == self.ALL else queryset.filter(state=value)

    def choices(self, changelist):  # type: ignore[no-untyped-def]
        # The parent's first choice ("All": no parameter) would mean the default here.
        facets = self.get_facet_queryset(changelist) if changelist.add_facets else None
        for i, (lookup, title) in enumerate(self.lookup_choices):
            if facets is not None:
                title = f"{title} ({facets.get(f'{i}__c', '-')})"
            yield {
                "selected": self.value() == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }


class AgeFilter(admin.SimpleListFilter):
    title = "age"
    parameter_name = "age"
    BANDS = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}

    def lookups(self, request, model_admin):  # type: ignore[no-untyped-def]
        return [
            ("1h", "Last hour"),
            ("24h", "Last 24 hours"),
            ("7d", "Last 7 days"),
            ("older", "Older than 7 days"),
        ]

    def queryset(self, request, queryset):  # type: ignore[no-untyped-def]
        now = timezone.now()
        band = self.BANDS.get(self.value() or "")
        if band is not None:
            return queryset.filter(created_at__gte=now - band)
        if self.value() == "older":
            return queryset.filter(created_at__lt=now - self.BANDS["7d"])
        return queryset


class CostFilter(admin.SimpleListFilter):
    title = "cost so far"
    parameter_name = "cost"
    BANDS = {
        "zero": (Decimal("0"), Decimal("0")),
        "under_cent": (Decimal("0.000001"), Decimal("0.009999")),
        "under_dollar": (Decimal("0.01"), Decimal("0.999999")),
        "dollar_plus": (Decimal("1"), None),
    }

    def lookups(self, request, model_admin):  # type: ignore[no-untyped-def]
        return [
            ("zero", "$0"),
            ("under_cent", "under $0.01"),
            ("under_dollar", "$0.01 - $1"),
            ("dollar_plus", "$1 or more"),
        ]

    def queryset(self, request, queryset):  # type: ignore[no-untyped-def]
        band = self.BANDS.get(self.value() or "")
        if band is None:
            return queryset
        low, high = band
        queryset = queryset.filter(job__cost_usd__gte=low)
        return queryset if high is None else queryset.filter(job__cost_usd__lte=high)


class AttemptsFilter(admin.SimpleListFilter):
    title = "attempts"
    parameter_name = "attempts"

    def lookups(self, request, model_admin):  # type: ignore[no-untyped-def]
        return [("1", "1"), ("2-4", "2 - 4"), ("5+", "5 or more")]

    def queryset(self, request, queryset):  # type: ignore[no-untyped-def]
        if self.value() == "1":
            return queryset.filter(attempts=1)
        if self.value() == "2-4":
            return queryset.filter(attempts__gte=2, attempts__lte=4)
        if self.value() == "5+":
            return queryset.filter(attempts__gte=5)
        return queryset


class ModelChoiceForm(forms.Form):
    model = forms.ChoiceField(label="Run on model")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        models = ModelPrice.objects.order_by("model").values_list("model", flat=True).distinct()
        self.fields["model"].choices = [(m, m) for m in models]  # type: ignore[attr-defined]


class CommentForm(forms.Form):
    comment = forms.CharField(
        label="Comment (optional)", required=False, widget=forms.Textarea(attrs={"rows": 3})
    )
