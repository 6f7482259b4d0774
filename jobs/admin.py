from django.contrib import admin

from jobs.models import LlmJob


@admin.register(LlmJob)
class LlmJobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "feature",
        "model",
        "status",
        "attempts",
        "cost_usd",
        "created_at",
        "user",
    ]
    list_filter = ["status", "feature", "model"]
    search_fields = ["=id", "idempotency_key"]
    list_select_related = ["user"]
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in LlmJob._meta.fields]

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        # Jobs are submitted through the API so that validation and enqueueing always happen.
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        # The ledger references jobs; money history is never deleted.
        return False
