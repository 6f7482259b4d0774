"""The feature policies in the admin: a form whose fallback list is checked by the same rule as
the API (features/services.py)."""

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from api.errors import ApplicationError
from features.models import FeaturePolicy
from features.services import (
    feature_policy_update,
    validate_fallback_models,
    validate_policy_deadline,
)


class FeaturePolicyForm(forms.ModelForm):
    fallback_models = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One priced model per line (or comma-separated), tried in this order.",
    )

    class Meta:
        model = FeaturePolicy
        fields = ["feature", "fallback_models", "mode", "deadline_seconds", "default_priority"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["fallback_models"] = "\n".join(self.instance.fallback_models or [])

    def clean_deadline_seconds(self) -> int | None:
        try:
            return validate_policy_deadline(self.cleaned_data.get("deadline_seconds"))
        except ApplicationError as error:
            raise forms.ValidationError(error.message) from error

    def clean_fallback_models(self) -> list[str]:
        raw = self.cleaned_data.get("fallback_models") or ""
        names = [n.strip() for n in raw.replace(",", "\n").splitlines() if n.strip()]
        try:
            return validate_fallback_models(names)
        except ApplicationError as error:
            raise forms.ValidationError(error.message) from error


@admin.register(FeaturePolicy)
class FeaturePolicyAdmin(admin.ModelAdmin):
    form = FeaturePolicyForm
    list_display = [
        "feature",
        "fallback_list",
        "mode",
        "deadline_seconds",
        "default_priority",
        "paused",
        "updated_at",
        "updated_by",
    ]
    list_select_related = ["updated_by"]
    list_filter = ["paused"]
    search_fields = ["feature"]
    actions = ["pause_features", "resume_features"]

    @admin.action(
        description="Pause the selected features (their jobs wait, nothing is sent)",
        permissions=["change"],
    )
    def pause_features(self, request: HttpRequest, queryset: QuerySet[FeaturePolicy]) -> None:
        for policy in queryset:
            feature_policy_update(feature=policy.feature, paused=True, by=request.user)  # type: ignore[arg-type]
        self.message_user(request, f"{queryset.count()} paused: their jobs wait.")

    @admin.action(
        description="Resume the selected features (their waiting jobs run, in order)",
        permissions=["change"],
    )
    def resume_features(self, request: HttpRequest, queryset: QuerySet[FeaturePolicy]) -> None:
        for policy in queryset:
            feature_policy_update(feature=policy.feature, paused=False, by=request.user)  # type: ignore[arg-type]
        self.message_user(request, f"{queryset.count()} resumed: their waiting jobs run.")

    @admin.display(description="fallback models")
    def fallback_list(self, policy: FeaturePolicy) -> str:
        return " → ".join(policy.fallback_models or []) or "—"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["feature"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: FeaturePolicy, form: Any, change: bool) -> None:
        # The one write path (features/services.py), as the API's PUT.
        saved = feature_policy_update(
            feature=obj.feature,
            fallback_models=form.cleaned_data["fallback_models"],
            mode=form.cleaned_data["mode"],
            deadline_seconds=form.cleaned_data.get("deadline_seconds"),
            default_priority=form.cleaned_data.get("default_priority", ""),
            by=request.user,  # type: ignore[arg-type]
        )
        obj.pk, obj.updated_at = saved.pk, saved.updated_at
