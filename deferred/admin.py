from django.contrib import admin

from deferred.models import ProviderBatch, ProviderBatchItem
from llmops.admin import ReadOnlyAdmin


@admin.register(ProviderBatch)
class ProviderBatchAdmin(ReadOnlyAdmin):
    list_display = [
        "provider_batch_id",
        "provider",
        "model",
        "status",
        "items_total",
        "created_at",
        "ended_at",
        "booked_at",
    ]
    list_filter = ["status", "provider", "model"]
    search_fields = ["=provider_batch_id"]


@admin.register(ProviderBatchItem)
class ProviderBatchItemAdmin(ReadOnlyAdmin):
    list_display = ["batch", "job", "attempt", "result_type", "superseded", "booked_at"]
    list_filter = ["result_type", "superseded"]
    list_select_related = ["batch"]
    search_fields = ["=job__id"]
