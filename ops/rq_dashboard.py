"""django-rq's dashboard behind a permission: staff status alone does not open it.

django-rq's views ask only for staff status (``staff_member_required``), so any staff member,
whatever the permissions given to them, could read every RQ job, empty a queue, and delete,
requeue or stop a job. Here each of its pages also needs django-rq's own permission
``django_rq.admin`` ("Access admin page"), at both places the dashboard is served:
``/django-rq/`` (llmops/urls.py) and the admin's ``/admin/django_rq/dashboard/`` (ops/admin.py).
Its Prometheus collector answers to the scrape token only (``metrics.views.rq_metrics``), never to a
session, as ``/metrics`` does; ``stats.json`` keeps django-rq's ``RQ_API_TOKEN`` for scripts.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, re_path
from django_rq import stats_views
from django_rq.urls import get_admin_urlpatterns

from metrics.views import rq_metrics

__all__ = ["RQ_DASHBOARD_PERMISSION", "rq_dashboard_urlpatterns", "rq_permission_required"]

RQ_DASHBOARD_PERMISSION = "django_rq.admin"
"""django-rq's own permission (its ``Dashboard`` model's only one): give it to whoever may
watch and operate the RQ queues by hand."""

View = Callable[..., HttpResponse]


def rq_permission_required(view: View) -> View:
    """Refuse (403) a staff member without ``RQ_DASHBOARD_PERMISSION``. Anyone else goes on to
    django-rq's own check: a visitor is sent to the sign-in page, a token may open stats.json."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user
        if user.is_active and user.is_staff and not user.has_perm(RQ_DASHBOARD_PERMISSION):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return wrapper


def rq_dashboard_urlpatterns(
    *, name_prefix: str = "", page_wrapper: Callable[[View], View] | None = None
) -> list[URLPattern]:
    """django-rq's URLs under their own names, every page behind ``rq_permission_required``
    (then ``page_wrapper``, e.g. the admin's ``admin_view``); stats.json is not wrapped by
    ``page_wrapper`` so that its token still works, and metrics is ours."""

    def page(view: View) -> View:
        guarded = rq_permission_required(view)
        return page_wrapper(guarded) if page_wrapper else guarded

    stats_json = rq_permission_required(stats_views.stats_json)
    return [
        re_path(r"^stats.json/?$", stats_json, name=f"{name_prefix}home_json"),
        re_path(r"^stats.json/(?P<token>[\w]+)?/?$", stats_json, name=f"{name_prefix}home_json"),
        re_path(r"^metrics/?$", rq_metrics, name=f"{name_prefix}metrics"),
        *(
            pattern
            for pattern in get_admin_urlpatterns(name_prefix=name_prefix, view_wrapper=page)
            # The page of the rq-scheduler package, which is not installed (rq's own scheduler
            # runs in the workers): it could only answer 500, and nothing links to it.
            if pattern.name != f"{name_prefix}scheduler_jobs"
        ),
    ]
