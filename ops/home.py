"""The home page (``/``, the admin's "View site"): where everything is, for a newcomer."""

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

EXAMPLE_BODY = (
    '{"feature": "summarize", "model": "claude-sonnet-4-6", "max_tokens": 200,\n'
    '       "messages": [{"role": "user", "content": "Say hello"}]}'
)


def home(request: HttpRequest) -> HttpResponse:
    context = {
        **admin.site.each_context(request),
        "title": "LLM job queue",
        "base_url": request.build_absolute_uri("/").rstrip("/"),
        "example_body": EXAMPLE_BODY,
        "debug": settings.DEBUG,
        "demo_username": settings.DEMO_USERNAME,
    }
    return render(request, "home.html", context)
