"""The project's own fake Anthropic Messages API (see app.py); run it with
``python manage.py fake_anthropic``."""

from .app import FakeAnthropicApp, create_app
from .server import FakeServer, build_server
from .state import PRICES, FakeProviderState

__all__ = [
    "PRICES",
    "FakeAnthropicApp",
    "FakeProviderState",
    "FakeServer",
    "build_server",
    "create_app",
]
