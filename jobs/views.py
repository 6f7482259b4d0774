"""The live page: submit a prompt and watch the job's events arrive over the WebSocket; in
development, with a fault of the fake provider picked for it (jobs/live_faults.py)."""

from typing import cast

from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.submit_throttles import SubmitThrottle
from api.submits import accepted_response
from jobs.live_faults import fault_choices, live_fault_submit
from jobs.models import LlmJob
from keys.scopes import JOBS_WRITE
from ledger.models import ModelPrice


@login_required
@ensure_csrf_cookie
def live_page(request: HttpRequest) -> HttpResponse:
    models = ModelPrice.objects.order_by("model").values_list("model", flat=True).distinct()
    context = {
        # The admin's header bar and user tools, without its app sidebar.
        **admin.site.each_context(request),
        "is_nav_sidebar_enabled": False,
        "title": "Live jobs",
        "models": list(models),
        "statuses": LlmJob.Status.values,
        "faults": fault_choices(),
    }
    return render(request, "jobs/live.html", context)


@extend_schema(exclude=True)  # a development tool, not part of the API
class LiveFaultJobApi(APIView):
    """``POST {"fault": <name>, "job": <submit body>}``: ``202`` as ``POST /api/v1/jobs/``."""

    throttle_classes = [SubmitThrottle]
    required_scopes = {"POST": JOBS_WRITE}

    def post(self, request: Request) -> Response:
        job = live_fault_submit(user=cast(User, request.user), data=request.data)
        return accepted_response(request, job, status_url_name="jobs:job-detail")
