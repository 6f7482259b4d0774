from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from api.errors import ValidationFailed
from providers.models import Provider
from providers.services import provider_check, provider_pause

ENDPOINT_PERMISSION = "providers.change_provider_endpoint"


class ProviderForm(forms.ModelForm):
    class Meta:
        model = Provider
        fields = ["name", "kind", "base_url", "api_key_env", "enabled"]

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if not self.errors:
            for field, value in cleaned.items():
                setattr(self.instance, field, value)
            try:
                provider_check(self.instance)  # the rules the command follows, in one place
            except ValidationFailed as exc:
                name = (exc.detail or {}).get("field")
                raise forms.ValidationError({name: exc.message} if name else exc.message) from None
        return cleaned


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    form = ProviderForm
    list_display = ["name", "kind", "base_url", "api_key_env", "enabled", "paused", "updated_at"]
    list_filter = ["kind", "enabled", "paused"]
    actions = ["pause_providers", "resume_providers"]

    @admin.action(
        description="Pause the selected providers (their jobs wait, nothing is sent)",
        permissions=["change"],
    )
    def pause_providers(self, request: HttpRequest, queryset: QuerySet[Provider]) -> None:
        for provider in queryset:
            provider_pause(name=provider.name, paused=True, by=request.user)
        self.message_user(request, f"{queryset.count()} paused: their jobs wait.")

    @admin.action(
        description="Resume the selected providers (their waiting jobs run, in order)",
        permissions=["change"],
    )
    def resume_providers(self, request: HttpRequest, queryset: QuerySet[Provider]) -> None:
        for provider in queryset:
            provider_pause(name=provider.name, paused=False, by=request.user)
        self.message_user(request, f"{queryset.count()} resumed: their waiting jobs run.")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Breakers, rate limits, prices and the ledger name a provider: it keeps its name.
        readonly = ["name"] if obj is not None else []
        if not request.user.has_perm(ENDPOINT_PERMISSION):  # type: ignore[union-attr]
            # Where the calls go decides which host gets every prompt and the key: a
            # permission of its own (superusers hold it), every change audited and alerted.
            readonly += ["base_url", "api_key_env"]
        return readonly
