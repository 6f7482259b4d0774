"""django-rq's dashboard in the admin, each page behind its permission (ops/rq_dashboard.py)."""

from functools import wraps
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django_rq import stats_views
from django_rq.admin import QueueAdmin
from django_rq.models import Dashboard

from ops.rq_dashboard import View, rq_dashboard_urlpatterns, rq_permission_required


class PermittedQueueAdmin(QueueAdmin):
    """django-rq's ``QueueAdmin`` with ``django_rq.admin`` asked on every page. It serves only
    django-rq's own pages: the model has no table, so there is nothing to add, change or delete."""

    actions = None

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        def admin_page(view: View) -> View:
            @wraps(view)
            def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
                request.current_app = self.admin_site.name  # type: ignore[attr-defined]
                return self.admin_site.admin_view(view)(request, *args, **kwargs)

            return wrapper

        home = admin_page(rq_permission_required(stats_views.stats))
        return [
            *rq_dashboard_urlpatterns(name_prefix="django_rq_", page_wrapper=admin_page),
            # The name the admin index links the app by; the same page as django_rq_home.
            path("", home, name="django_rq_dashboard_changelist"),
        ]


if admin.site.is_registered(Dashboard):
    admin.site.unregister(Dashboard)
admin.site.register(Dashboard, PermittedQueueAdmin)
