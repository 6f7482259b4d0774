from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.urls import include, path

from jobs.views import live_page

urlpatterns = [
    path("admin/", admin.site.urls),
    path("live/", live_page, name="live"),
    path("login/", LoginView.as_view(), name="login"),
    path("api/v1/jobs/", include("jobs.urls")),
    path("api/v1/failures/", include("alerts.urls")),
    path("api/v1/", include("ledger.budget_urls")),
    path("api/v1/costs/", include("ledger.urls")),
    path("django-rq/", include("django_rq.urls")),
]
