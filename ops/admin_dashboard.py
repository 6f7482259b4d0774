"""The ops dashboard in the admin: a page and the JSON it polls, for staff only.

Both are wrapped in ``admin.site.admin_view``, so they answer exactly as other admin pages do:
anonymous and non-staff users are sent to the admin's login, responses are never cached. They are
mounted at ``/admin/ops/dashboard/`` by ``llmops/urls.py``, ahead of ``admin.site.urls`` (whose
catch-all would answer first otherwise). The numbers come from ``ops.dashboard``.
"""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from ops.dashboard import (
    DEFAULT_WINDOW_HOURS,
    REFRESH_SECONDS,
    WINDOW_HOURS,
    dashboard_data,
    initial_window_hours,
)

__all__ = ["urlpatterns"]


def _hours(request: HttpRequest) -> int | None:
    """The window asked for (``?hours=``), the default when absent, None when not offered."""
    raw = request.GET.get("hours", "")
    if not raw:
        return DEFAULT_WINDOW_HOURS
    return int(raw) if raw.isdigit() and int(raw) in WINDOW_HOURS else None


@require_GET
def dashboard_view(request: HttpRequest) -> HttpResponse:
    # Without ?hours= (or with one not offered) the page opens on the window that holds the
    # data; data.json without it keeps its fixed default.
    asked = _hours(request) if request.GET.get("hours") else None
    context = {
        **admin.site.each_context(request),
        "title": "Ops dashboard",
        "hours": asked or initial_window_hours(timezone.now()),
        "window_choices": WINDOW_HOURS,
        "refresh_seconds": REFRESH_SECONDS,
        "data_url": reverse("ops_dashboard_data"),
    }
    return TemplateResponse(request, "admin/ops/dashboard.html", context)


@require_GET
def dashboard_data_view(request: HttpRequest) -> JsonResponse:
    hours = _hours(request)
    if hours is None:
        return JsonResponse(
            {
                "code": "invalid_window",
                "message": f"hours must be one of {', '.join(map(str, WINDOW_HOURS))}.",
                "detail": {"choices": list(WINDOW_HOURS)},
            },
            status=400,
        )
    return JsonResponse(dashboard_data(hours=hours))


urlpatterns: list[URLPattern] = [
    path("", admin.site.admin_view(dashboard_view), name="ops_dashboard"),
    path("data.json", admin.site.admin_view(dashboard_data_view), name="ops_dashboard_data"),
]
