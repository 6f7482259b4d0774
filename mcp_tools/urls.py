from django.urls import path

from mcp_tools.apis import MCPServerListCreateApi

app_name = "mcp_tools"

urlpatterns = [
    path("", MCPServerListCreateApi.as_view(), name="mcp-server-list"),
]
