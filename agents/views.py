"""The live page of agent runs: start one with the registered tools and watch its steps arrive
over the WebSocket (the ``agent.step`` / ``agent.updated`` events), approve, reject, cancel."""

import json

from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from agents.tools import registered_tools
from ledger.models import ModelPrice

DEMO_SCRIPT = [
    [
        {"name": "clock", "input": {"timezone": "Asia/Tokyo"}},
        {"name": "calculator", "input": {"expression": "6*7"}},
    ],
    [
        {
            "name": "send_email",
            "input": {"to": "team@example.com", "subject": "Answer", "body": "It is 42."},
        }
    ],
    "Done: the time in Tokyo is in the clock's result, 6*7 = 42, and the team was told.",
]
"""What the fake provider plays when the demo prompt is used (fake_tool_script=)."""


@login_required
@ensure_csrf_cookie
def live_agents_page(request: HttpRequest) -> HttpResponse:
    models = ModelPrice.objects.order_by("model").values_list("model", flat=True).distinct()
    tools = sorted(registered_tools().values(), key=lambda tool: tool.name)
    context = {
        **admin.site.each_context(request),
        "is_nav_sidebar_enabled": False,
        "title": "Live agent runs",
        "models": list(models),
        "tools": tools,
        "demo_prompt": (
            "What time is it in Tokyo, what is 6*7, and tell the team. "
            f"fake_tool_script={json.dumps(DEMO_SCRIPT)}"
        ),
    }
    return render(request, "agents/live.html", context)
