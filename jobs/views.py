"""The live page: submit a prompt and watch the job's events arrive over the WebSocket."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from ledger.models import ModelPrice


@login_required
@ensure_csrf_cookie
def live_page(request: HttpRequest) -> HttpResponse:
    models = ModelPrice.objects.order_by("model").values_list("model", flat=True).distinct()
    return render(request, "jobs/live.html", {"models": list(models)})
