"""Serving the fake provider: uvicorn as the command and the tests start it (h11 on asyncio, a
deep backlog, keep-alive), quiet about the answers it drops on purpose."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import uvicorn

from .app import FakeAnthropicApp

__all__ = ["FakeServer", "build_server"]


class _DropLogFilter(logging.Filter):
    """A drop ends the response on purpose; uvicorn would log it as an application error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "ASGI callable returned without completing response."


def build_server(app: FakeAnthropicApp, host: str = "127.0.0.1", port: int = 8787) -> FakeServer:
    """uvicorn on the asyncio loop with h11, a 2048 backlog, no concurrency limit, keep-alive on."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        backlog=2048,
        loop="asyncio",
        http="h11",
        lifespan="on",
        limit_concurrency=None,
        timeout_keep_alive=15,
        timeout_graceful_shutdown=3,
        access_log=False,
    )
    error_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DropLogFilter) for f in error_log.filters):
        error_log.addFilter(_DropLogFilter())
    server = FakeServer(config)
    server.fake_app = app
    return server


class FakeServer(uvicorn.Server):
    """uvicorn.Server that records the bound port (port 0 picks a free one) and sets ``ready``
    (a threading.Event) once it listens, after calling ``on_started(server)`` if given."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()
        self.bound_port: int | None = None
        self.on_started: Callable[[FakeServer], None] | None = None
        self.fake_app: FakeAnthropicApp | None = None

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.bound_port = self.servers[0].sockets[0].getsockname()[1]
            if self.on_started:
                self.on_started(self)
            self.ready.set()

    async def shutdown(self, sockets: Any = None) -> None:
        if self.fake_app is not None:
            self.fake_app.closing.set()
        await super().shutdown(sockets)
