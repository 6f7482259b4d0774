from django.contrib import admin
from django.core.exceptions import ValidationError

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

    def get_search_results(self, request, queryset, search_term):  # type: ignore[no-untyped-def]
        # An id search with a malformed UUID finds nothing rather than failing.
        try:
            return super().get_search_results(request, queryset, search_term)
        except ValidationError:
            return queryset.none(), False
