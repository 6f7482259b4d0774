from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from providers.models import Provider
from providers.services import provider_check


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "base_url", "api_key_env", "enabled", "updated_at"]
    list_filter = ["kind", "enabled"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Breakers, rate limits, prices and the ledger name a provider: it keeps its name.
        return ["name"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: Provider, form: Any, change: bool) -> None:
        provider_check(obj)
        super().save_model(request, obj, form, change)
