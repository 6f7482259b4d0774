"""API keys in the admin: staff see every key and revoke any (the action); adding one shows its
secret once, on the page that answers the add, and never again. A key is never edited or
deleted: its jobs and ledger rows point at it."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from keys.models import ApiKey
from keys.scopes import ALL_SCOPES
from keys.selectors import api_key_budget
from keys.services import api_key_create, api_key_revoke
from keys.validation import BUDGET_PERIODS, KeyRequest

_SECRET_ATTRIBUTE = "_created_api_key_secret"


class ApiKeyAddForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(scope, scope) for scope in ALL_SCOPES], widget=forms.CheckboxSelectMultiple
    )
    max_budget_usd = forms.DecimalField(
        required=False,
        min_value=0.000001,
        max_digits=14,
        decimal_places=6,
        label="Max budget (USD)",
    )
    budget_period = forms.ChoiceField(choices=[(p, p) for p in BUDGET_PERIODS], initial="month")

    class Meta:
        model = ApiKey
        fields = ["user", "name", "scopes", "expires_at", "rpm"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "user",
        "prefix",
        "scope_list",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
        "active",
    ]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "created_at"]
    list_select_related = ["user"]
    search_fields = ["name", "prefix", "user__username"]
    autocomplete_fields = ["user"]
    actions = ["revoke_keys"]
    readonly_fields = ["budget"]
    fields = [
        "user",
        "name",
        "prefix",
        "scopes",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
        "rpm",
        "budget",
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiKey]:
        return super().get_queryset(request).prefetch_related("budgets")

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = ApiKeyAddForm
            superuser = request.user.is_superuser  # type: ignore[union-attr]
            kwargs["fields"] = None if superuser else ["name", "scopes", "expires_at", "rpm"]
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            # A key acts as its user: staff who could mint one for anyone could become anyone.
            # Staff add keys for themselves; a superuser for anyone.
            superuser = request.user.is_superuser  # type: ignore[union-attr]
            return [
                "user" if superuser else "added_for",
                "name",
                "scopes",
                "expires_at",
                "rpm",
                "max_budget_usd",
                "budget_period",
            ]
        return self.fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return [] if request.user.is_superuser else ["added_for"]  # type: ignore[union-attr]
        return self.fields

    @admin.display(description="user")
    def added_for(self, obj: Any) -> str:
        return "You: only a superuser adds keys for other users."

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("keys.revoke_apikey")  # type: ignore[union-attr]

    @admin.display(description="scopes")
    def scope_list(self, key: ApiKey) -> str:
        return ", ".join(key.scopes)

    @admin.display(description="active", boolean=True)
    def active(self, key: ApiKey) -> bool:
        return key.is_active

    @admin.display(description="max budget")
    def budget(self, key: ApiKey) -> str:
        budget = api_key_budget(key)
        return f"${budget.limit_usd} a {budget.period}" if budget else "-"

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        data = form.cleaned_data
        user = data["user"] if request.user.is_superuser else request.user  # type: ignore[union-attr]
        assert isinstance(user, User)
        key, secret = api_key_create(
            user=user,
            request=KeyRequest(
                name=data["name"],
                scopes=[scope for scope in ALL_SCOPES if scope in data["scopes"]],
                expires_at=data.get("expires_at"),
                max_budget_usd=data.get("max_budget_usd"),
                budget_period=data.get("budget_period") or "month",
                rpm=data.get("rpm"),
            ),
        )
        form.instance = key
        obj.pk = key.pk
        setattr(request, _SECRET_ATTRIBUTE, secret)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # api_key_create wrote everything

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return super().log_addition(request, ApiKey.objects.get(pk=obj.pk), message)

    def response_add(
        self, request: HttpRequest, obj: ApiKey, post_url_continue: Any = None
    ) -> HttpResponse:
        # The secret on this page, never in a message (messages are stored in a cookie or the
        # session) and never in a redirect.
        key = ApiKey.objects.select_related("user").get(pk=obj.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": "API key created",
            "key": key,
            "secret": getattr(request, _SECRET_ATTRIBUTE),
            "opts": self.model._meta,
        }
        response = TemplateResponse(request, "admin/keys/apikey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke the selected keys", permissions=["revoke"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = 0
        for key in queryset.filter(revoked_at__isnull=True):
            api_key_revoke(key=key)
            revoked += 1
        self.message_user(request, f"{revoked} keys revoked.", messages.SUCCESS)
