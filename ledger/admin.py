from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

from ledger import admin_budgets  # noqa: F401  (registers BudgetAdmin)
from ledger.admin_reports import CostReportAdminMixin
from ledger.models import CostEntry, ModelPrice
from llmops.admin import ReadOnlyAdmin

# Columns of unbounded size: a changelist page must not fetch them for rows it only lists.
LARGE_FIELD_TYPES = (models.TextField, models.JSONField, models.BinaryField)


def large_fields_not_shown(model_admin: admin.ModelAdmin, request: HttpRequest) -> list[str]:
    """The large columns of the model, and of the relations the list joins, it does not show.

    Derived from the models rather than spelled out, so a column added later is deferred too.
    """
    shown = set(model_admin.get_list_display(request))
    opts = model_admin.model._meta
    deferred = [
        field.name
        for field in opts.concrete_fields
        if isinstance(field, LARGE_FIELD_TYPES) and field.name not in shown
    ]
    joined = model_admin.get_list_select_related(request)
    for relation in joined if isinstance(joined, list | tuple) else ():
        related_opts = opts.get_field(relation).related_model._meta  # type: ignore[union-attr]
        deferred += [
            f"{relation}__{field.name}"
            for field in related_opts.concrete_fields
            if isinstance(field, LARGE_FIELD_TYPES)
        ]
    return deferred


class LeanChangeList(ChangeList):
    """A changelist that defers the large columns it does not show; detail pages load them."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.defer(*large_fields_not_shown(self.model_admin, request))


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = [
        "model",
        "effective_from",
        "input_per_mtok",
        "output_per_mtok",
        "cache_write_5m_per_mtok",
        "cache_write_1h_per_mtok",
        "cache_read_per_mtok",
        "batch_discount",
        "max_output_tokens",
    ]
    list_filter = ["model"]

    def get_readonly_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        # A price in force may have priced attempts already: change it with a new row.
        if obj is not None:
            return [f.name for f in ModelPrice._meta.fields]
        return []


@admin.register(CostEntry)
class CostEntryAdmin(CostReportAdminMixin, ReadOnlyAdmin):
    list_display = [
        "created_at",
        "job",
        "attempt",
        "feature",
        "model",
        "outcome",
        "http_status",
        "reason_code",
        "cost_usd",
        "is_estimated",
    ]
    list_filter = ["outcome", "is_estimated", "feature", "model"]
    search_fields = ["=job__id", "request_id"]
    # The job column shows str(job): feature, model, id and status, none of them large.
    list_select_related = ["job"]
    date_hierarchy = "created_at"

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return LeanChangeList
