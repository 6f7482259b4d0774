from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from redis.exceptions import RedisError

from ratelimits.models import RateLimit
from ratelimits.selectors import rate_limit_statuses
from ratelimits.services import rate_limit_delete, rate_limit_save


@admin.register(RateLimit)
class RateLimitAdmin(admin.ModelAdmin):
    """Configured limits per provider and model, and above them what every limiter knows now:
    configured and learned limits, the limits in force, the window's use, pause and waiters."""

    list_display = ["provider", "model", "rpm", "input_tpm", "output_tpm", "enabled", "updated_at"]
    list_editable = ["rpm", "input_tpm", "output_tpm", "enabled"]
    list_filter = ["provider", "enabled"]
    search_fields = ["model"]
    fields = ["provider", "model", "rpm", "input_tpm", "output_tpm", "enabled", "note"]

    def save_model(self, request: HttpRequest, obj: RateLimit, form: Any, change: bool) -> None:
        rate_limit_save(rate_limit=obj)

    def delete_model(self, request: HttpRequest, obj: RateLimit) -> None:
        rate_limit_delete(rate_limit=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[RateLimit]) -> None:
        for rate_limit in queryset:
            rate_limit_delete(rate_limit=rate_limit)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        context = dict(extra_context or {})
        try:
            context["limit_statuses"] = rate_limit_statuses()
        except RedisError as exc:
            context["limit_statuses_error"] = f"Redis did not answer ({type(exc).__name__})."
        return super().changelist_view(request, context)  # type: ignore[return-value]
