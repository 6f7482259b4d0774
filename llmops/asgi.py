"""ASGI entry point: HTTP through Django, WebSocket (live job events) through Channels."""

import os
from typing import Any

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmops.settings")

# Any: each layer below wraps the one before in a class of its own.
http_application: Any = get_asgi_application()

if settings.SERVE_STATIC:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    http_application = ASGIStaticFilesHandler(http_application)

from api.body_limits import BodyLimitMiddleware  # noqa: E402

# Outermost: Django reads a whole body before anything else of ours runs (api/body_limits.py).
http_application = BodyLimitMiddleware(http_application)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from api.websocket_auth import token_or_session_ws  # noqa: E402
from jobs.ws_urls import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": http_application,
        "websocket": token_or_session_ws(URLRouter(websocket_urlpatterns)),
    }
)
