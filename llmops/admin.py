"""The admin site (the index's order) and the building blocks the apps' admins share."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

FIRST_SECTIONS = [("dlq", "FailureRecord"), ("ledger", "Budget")]
"""The sections on top of the index and the sidebar, in this order, each with this model first:
the dead letters waiting for someone, then the budgets holding spend. The other sections follow
in the admin's own order (by name)."""


class LlmopsAdminSite(admin.AdminSite):
    """Django's admin site, what needs someone on top (``admin.site``: llmops/apps.py)."""

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[Any]:
        apps = super().get_app_list(request, app_label)
        first_model = dict(FIRST_SECTIONS)
        rank = {label: i for i, (label, _) in enumerate(FIRST_SECTIONS)}
        for app in apps:
            if (model := first_model.get(app["app_label"])) is not None:
                # Stable: the section's other models keep their order.
                app["models"].sort(key=lambda row: row["object_name"] != model)
        return sorted(apps, key=lambda app: rank.get(app["app_label"], len(rank)))


class ReadOnlyAdmin(admin.ModelAdmin):
    """A record of what happened (a ledger row, a sent alert): seen in the admin, never edited.

    Corrections are new rows written by services, so the admin offers no add, change or delete.
    """

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
