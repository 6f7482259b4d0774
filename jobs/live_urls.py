"""The live page's development endpoint (jobs/live_faults.py), under /live/."""

from django.urls import path

from jobs.views import LiveFaultJobApi

urlpatterns = [
    path("fault-jobs/", LiveFaultJobApi.as_view(), name="live-fault-jobs"),
]
