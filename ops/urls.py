from django.urls import path, re_path

from ops import health_views, views

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
    # django-rq's metrics endpoint, here so that it answers to the same token and networks.
    re_path(r"^django-rq/metrics/?$", views.rq_metrics, name="rq-metrics"),
    # Public: load balancers and orchestrators probe them (ops/health.py).
    path("healthz", health_views.healthz, name="healthz"),
    path("readyz", health_views.readyz, name="readyz"),
]
