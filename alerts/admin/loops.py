"""Long-running loops (reconciler, monitor): when each last finished a pass, read-only."""

from datetime import timedelta

from django.contrib import admin
from django.utils import timezone

from alerts.models import LoopHeartbeat
from llmops.admin import ReadOnlyAdmin
from loops.loop_health import STALLED_AFTER_INTERVALS


@admin.register(LoopHeartbeat)
class LoopHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ["name", "healthy", "last_pass_at", "interval_seconds", "host", "last_error_at"]
    readonly_fields = [
        "name",
        "interval_seconds",
        "last_pass_at",
        "host",
        "last_error",
        "last_error_at",
    ]

    @admin.display(boolean=True, description="passing")
    def healthy(self, obj: LoopHeartbeat) -> bool | None:
        if obj.last_pass_at is None:
            return None  # stopped on purpose
        limit = timedelta(seconds=obj.interval_seconds * STALLED_AFTER_INTERVALS)
        return timezone.now() - obj.last_pass_at <= limit
