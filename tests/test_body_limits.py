"""Every request body has a bound (api/body_limits.py): the ASGI layer refuses a declared or
streamed body over its view's limit with 413 ``request_too_large`` before Django reads it, every
API view parses only through a bounded parser, and WebSocket messages are bounded by the server
and by the consumer.

The refusals are checked against the ASGI application itself (``llmops.asgi.application``, the
one the Procfile's web line serves) and through the real web server, with a real HTTP client
sending a chunked body that declares no length."""

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.views import APIView

from api.body_limits import body_limit_for_path, body_limit_for_view
from api.parsers import LimitedJSONParser
from jobs.models import LlmJob
from keys.testing import api_key_for
from llmops.asgi import application
from tests.conftest import job_body, make_user


def _views(resolver: URLResolver | None = None, prefix: str = "/") -> Iterator[tuple[str, Any]]:
    """(path pattern, view callable) of every URL the project serves."""
    resolver = resolver or get_resolver()
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _views(entry, route)
        elif isinstance(entry, URLPattern):
            yield route, entry.callback


def _api_views() -> list[tuple[str, type[APIView]]]:
    found = [(route, getattr(view, "cls", None)) for route, view in _views()]
    return [(route, cls) for route, cls in found if isinstance(cls, type)]


def test_every_api_view_parses_bodies_only_through_a_bounded_parser():
    api_views = _api_views()
    assert any(route == "/api/v1/jobs/" for route, _ in api_views)
    for route, view in api_views:
        for parser in view.parser_classes:
            assert issubclass(parser, LimitedJSONParser), f"{route} {view.__name__}: {parser}"


def _concrete(route: str) -> str:
    """A path that ``route`` matches: each converter filled with a value it accepts."""
    route = re.sub(r"<int:[^>]+>", "1", route)
    return re.sub(r"<[^>]+>", "00000000-0000-0000-0000-000000000001", route)


def test_the_asgi_layer_applies_each_api_views_own_parser_limit():
    checked = 0
    for route, view in _api_views():
        if route.startswith("/^") or "(?P" in route:
            continue  # regex routes (django-rq's): not DRF views of ours
        parser_limits = [
            getattr(settings, getattr(p, "limit_setting", "LLM_MAX_REQUEST_BYTES"))
            for p in view.parser_classes
        ]
        assert body_limit_for_path(_concrete(route)) == max(parser_limits), route
        checked += 1
    assert checked >= 6


class _BigParser(LimitedJSONParser):
    limit_setting = "TEST_BIG_BODY_BYTES"


class _BigView(APIView):
    parser_classes = [_BigParser, LimitedJSONParser]


def test_a_view_takes_a_larger_limit_by_naming_a_parser_with_a_setting_of_its_own(settings):
    settings.TEST_BIG_BODY_BYTES = 8 * 1024 * 1024
    settings.LLM_MAX_REQUEST_BYTES = 4096

    assert body_limit_for_view(_BigView) == 8 * 1024 * 1024
    assert body_limit_for_view(APIView) == 4096
    assert body_limit_for_view(None) == 4096  # a function view: the admin, the sign-in page
    assert body_limit_for_path("/admin/login/") == 4096
    assert body_limit_for_path("/no/such/page/") == 4096


def _request(path: str, chunks: list[bytes], *, declared: int | None = None) -> dict[str, Any]:
    """One request through llmops.asgi.application, its body sent in ``chunks``."""
    headers = [(b"host", b"localhost"), (b"content-type", b"application/json")]
    if declared is not None:
        headers.append((b"content-length", str(declared).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }

    async def run() -> dict[str, Any]:
        app = ApplicationCommunicator(application, scope)
        for index, chunk in enumerate(chunks):
            await app.send_input(
                {"type": "http.request", "body": chunk, "more_body": index < len(chunks) - 1}
            )
        start = await app.receive_output(timeout=10)
        body = b""
        while True:
            message = await app.receive_output(timeout=10)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await app.wait(timeout=10)
        return {"status": start["status"], "headers": dict(start["headers"]), "body": body}

    return async_to_sync(run)()


def _is_413(response: dict[str, Any], limit: int) -> None:
    assert response["status"] == 413, response
    assert json.loads(response["body"]) == {
        "code": "request_too_large",
        "message": f"The request body is larger than {limit} bytes.",
        "detail": {"limit_bytes": limit},
    }
    assert response["headers"][b"connection"] == b"close"


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/admin/login/", "/login/", "/nowhere/"])
def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(path, settings):
    settings.LLM_MAX_REQUEST_BYTES = 2048

    # Nothing of the body is sent: the refusal cannot have waited for it.
    _is_413(_request(path, [b""], declared=10 * 1024 * 1024), 2048)


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/admin/login/", "/login/", "/nowhere/"])
def test_a_body_that_declares_no_length_is_cut_off_once_past_the_limit(path, settings):
    settings.LLM_MAX_REQUEST_BYTES = 2048

    _is_413(_request(path, [b"x" * 1000, b"x" * 1000, b"x" * 1000, b"x" * 1000]), 2048)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_body_within_the_limit_reaches_the_view_whole(settings):
    settings.LLM_MAX_REQUEST_BYTES = 4096
    token = api_key_for(make_user("carol"))
    body = json.dumps(job_body()).encode()
    assert len(body) < 4096
    headers = [(b"authorization", f"Token {token}".encode())]
    half = len(body) // 2

    async def run() -> int:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/api/v1/jobs/",
            "raw_path": b"/api/v1/jobs/",
            "root_path": "",
            "query_string": b"",
            "headers": [
                (b"host", b"localhost"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        app = ApplicationCommunicator(application, scope)
        await app.send_input({"type": "http.request", "body": body[:half], "more_body": True})
        await app.send_input({"type": "http.request", "body": body[half:]})
        start = await app.receive_output(timeout=10)
        await app.receive_output(timeout=10)
        return int(start["status"])

    assert async_to_sync(run)() == 202
    assert LlmJob.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_the_procfile_web_line_refuses_large_bodies_and_websocket_messages(asgi_server):
    """Real uvicorn, real clients: a declared body, a chunked one (no length), a WebSocket
    message; uvicorn's --ws-max-size is WS_MAX_MESSAGE_BYTES (16 KiB by default)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync import client as websockets

    token = api_key_for(make_user("dora"))
    auth = {"Authorization": f"Token {token}"}
    limit = 1024 * 1024

    declared = httpx.post(
        f"{asgi_server}/api/v1/jobs/",
        content=b"{" + b" " * limit + b"}",
        headers={**auth, "Content-Type": "application/json"},
        timeout=30,
    )
    assert declared.status_code == 413
    assert declared.json()["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:
        for _ in range(64):
            yield b"x" * 65536  # 4 MiB in all, never declared

    chunked = httpx.post(f"{asgi_server}/login/", content=chunks(), timeout=30)
    assert chunked.status_code == 413
    assert chunked.json()["detail"] == {"limit_bytes": limit}
    assert LlmJob.objects.count() == 0

    url = asgi_server.replace("http://", "ws://") + "/ws/jobs/"
    with websockets.connect(url, subprotocols=["token", token], open_timeout=10) as ws:
        ws.send("hello")  # ignored, the socket stays open
        ws.ping().wait(timeout=5)
        ws.send("x" * (16 * 1024 + 1))
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    assert ws.close_code == 1009


@pytest.mark.django_db(transaction=True)
def test_the_consumer_closes_on_a_message_over_the_limit_and_ignores_the_rest(settings):
    settings.WS_MAX_MESSAGE_BYTES = 1024
    token = api_key_for(make_user("erin"))

    async def run() -> dict[str, Any]:
        ws = WebsocketCommunicator(application, "/ws/jobs/", subprotocols=["token", token])
        connected, _ = await ws.connect()
        assert connected
        await ws.send_to(text_data="not even json")
        await ws.send_to(bytes_data=b"\x00" * 1024)
        assert await ws.receive_nothing(timeout=0.3)
        await ws.send_to(text_data="é" * 513)  # 1,026 bytes in UTF-8
        closed = await ws.receive_output(timeout=5)
        await ws.disconnect()
        return dict(closed)

    assert async_to_sync(run)() == {"type": "websocket.close", "code": 1009}
