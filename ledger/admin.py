from django.contrib import admin

from ledger.models import CostEntry, ModelPrice
from llmops.admin import ReadOnlyAdmin


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
class CostEntryAdmin(ReadOnlyAdmin):
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
    list_select_related = ["job"]
    date_hierarchy = "created_at"
