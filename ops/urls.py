from django.urls import path

from ops import health_views

urlpatterns = [
    # Public: load balancers and orchestrators probe them (ops/health.py).
    path("healthz", health_views.healthz, name="healthz"),
    path("readyz", health_views.readyz, name="readyz"),
]
