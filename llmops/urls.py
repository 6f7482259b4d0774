from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agents.tool_apis import AgentToolListApi
from agents.views import live_agents_page
from api.apis import MeApi
from api.trailing_slash import CATCH_ALL, api_not_found
from gateway.urls import anthropic_urlpatterns, openai_urlpatterns
from jobs.views import live_page
from ops.home import home
from ops.rq_dashboard import rq_dashboard_urlpatterns

# Under /api/, a URL no view matches answers the API's JSON error body (api/errors.py).
handler404 = "api.errors.not_found"

urlpatterns = [
    path("", home, name="home"),  # the admin's "View site" too
    # Staff-only admin pages of ops; before the admin, whose catch-all would answer first.
    path("admin/ops/dashboard/", include("ops.admin_dashboard")),
    path("admin/", admin.site.urls),
    path("live/", live_page, name="live"),
    path("live/agents/", live_agents_page, name="live-agents"),
    path("live/", include("jobs.live_urls")),  # the fault picker (development only)
    path("login/", LoginView.as_view(), name="login"),
    # Public: the OpenAPI 3 schema of every DRF view and its Swagger UI (from our static files).
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/me/", MeApi.as_view(), name="me"),
    path("api/v1/keys/", include("keys.urls")),
    path("api/v1/jobs/", include("jobs.urls")),
    path("api/v1/embeddings/", include("embeddings.urls")),
    path("api/v1/features/", include("features.urls")),
    path("api/v1/failures/", include("dlq.urls")),
    path("api/v1/", include("ledger.budget_urls")),
    path("api/v1/costs/", include("ledger.urls")),
    path("api/v1/batches/", include("batches.urls")),
    path("api/v1/pipelines/", include("pipelines.urls")),
    path("api/v1/agent-runs/", include("agents.urls")),
    path("api/v1/agent-tools/", AgentToolListApi.as_view(), name="agent-tool-list"),
    path("api/v1/mcp-servers/", include("mcp_tools.urls")),
    path("api/v1/webhooks/", include("webhooks.urls")),
    # The front doors: the providers' own APIs, for their SDKs (docs/front-doors.md).
    path("anthropic/", include(anthropic_urlpatterns)),
    path("openai/", include(openai_urlpatterns)),
    # Before django-rq's own URLs: its metrics endpoint is served with /metrics, under one
    # protection (metrics/access.py).
    path("", include("metrics.urls")),
    path("", include("ops.urls")),
    # django-rq's dashboard, each page behind its permission (ops/rq_dashboard.py).
    path("django-rq/", include((rq_dashboard_urlpatterns(), "django_rq"))),
    # Last: under /api/, a path no view serves answers the API's JSON 404 (api/trailing_slash.py).
    re_path(r"^api/(?P<rest>.*)$", api_not_found, name=CATCH_ALL),
]
