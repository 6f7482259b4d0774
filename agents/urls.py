from django.urls import path

from agents.apis import (
    AgentRunApprovalApi,
    AgentRunCancelApi,
    AgentRunDetailApi,
    AgentRunListCreateApi,
)

app_name = "agents"

urlpatterns = [
    path("", AgentRunListCreateApi.as_view(), name="agent-run-list"),
    path("<str:run_id>/", AgentRunDetailApi.as_view(), name="agent-run-detail"),
    path(
        "<str:run_id>/approvals/<str:call_id>/",
        AgentRunApprovalApi.as_view(),
        name="agent-run-approval",
    ),
    path("<str:run_id>/cancel/", AgentRunCancelApi.as_view(), name="agent-run-cancel"),
]
