"""Admin for alert routing (editable) and the alerts sent (read-only, with their deliveries)."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join

from alerts.models import Alert, AlertDelivery, AlertRoute
from alerts.targets import redact_target
from llmops.admin import ReadOnlyAdmin


@admin.register(AlertRoute)
class AlertRouteAdmin(admin.ModelAdmin):
    list_display = ["id", "severity", "kind", "name", "redacted_target", "enabled", "created_at"]
    list_display_links = ["id", "name"]
    list_editable = ["enabled"]
    list_filter = ["severity", "kind", "enabled"]
    search_fields = ["name"]
    fields = ["name", "severity", "kind", "target", "enabled"]

    @admin.display(description="target")
    def redacted_target(self, route: AlertRoute) -> str:
        # The list is seen over shoulders and in screenshots; the form shows the real value.
        return redact_target(kind=route.kind, target=route.target)


class AlertDeliveryInline(admin.TabularInline):
    model = AlertDelivery
    extra = 0
    can_delete = False
    fields = ["kind", "redacted_target", "state", "attempts", "last_error", "delivered_at"]
    readonly_fields = ["kind", "redacted_target", "state", "attempts", "last_error", "delivered_at"]

    @admin.display(description="target")
    def redacted_target(self, delivery: AlertDelivery) -> str:
        return redact_target(kind=delivery.kind, target=delivery.target)

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "severity",
        "action",
        "title",
        "state",
        "folded_count",
        "repeat_count",
        "attempts",
        "delivery_states",
        "failure",
    ]
    list_filter = ["severity", "action", "state", "source"]
    search_fields = ["title", "fingerprint"]
    date_hierarchy = "created_at"
    list_select_related = ["failure"]
    readonly_fields = [f.name for f in Alert._meta.fields]
    inlines = [AlertDeliveryInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Alert]:
        # delivery_states reads every row's deliveries: one prefetch query, not one per row.
        return super().get_queryset(request).prefetch_related("deliveries")

    @admin.display(description="deliveries")
    def delivery_states(self, alert: Alert) -> str:
        return (
            format_html_join(", ", "{} {}", ((d.kind, d.state) for d in alert.deliveries.all()))
            or "-"
        )
