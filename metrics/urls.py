from django.urls import path, re_path

from metrics import views

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
    # django-rq's metrics endpoint, here so that it answers to the same token and networks.
    re_path(r"^django-rq/metrics/?$", views.rq_metrics, name="rq-metrics"),
]
