"""ASGI entry point: HTTP through Django, WebSocket (live job events) through Channels."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmops.settings")

http_application = get_asgi_application()

if settings.SERVE_STATIC:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    http_application = ASGIStaticFilesHandler(http_application)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from jobs.routing import websocket_urlpatterns  # noqa: E402
from llmops.wsauth import token_or_session_ws  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": http_application,
        "websocket": token_or_session_ws(URLRouter(websocket_urlpatterns)),
    }
)
