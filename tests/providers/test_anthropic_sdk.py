"""The Anthropic provider as the provider sees it: headers, no SDK retries, what it reports."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from providers.base import ProviderOutcome, ProviderRequest
from providers.registry import get_provider

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-haiku-4-5",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 10,
        "output_tokens": 3,
        "cache_creation_input_tokens": 30,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 20},
    },
}


def sse(message: dict[str, Any]) -> bytes:
    """A message as the Messages API streams it."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index,
                                     "content_block": {**block, "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": index,
                                     "delta": {"type": "text_delta", "text": block["text"]}}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]  # fmt: skip
    events += [
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                           "usage": {"output_tokens": usage["output_tokens"]}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events).encode()


class Recorder:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.body: dict[str, Any] = MESSAGE
        self.headers: dict[str, str] = {"request-id": "req_abc"}


@pytest.fixture
def recorder(settings: Any) -> Iterator[Recorder]:
    rec = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers["content-length"])
            rec.requests.append(
                {"headers": dict(self.headers), "body": json.loads(self.rfile.read(length))}
            )
            if rec.status == 200:
                payload, kind = sse(rec.body), "text/event-stream"
            else:
                payload, kind = json.dumps(rec.body).encode(), "application/json"
            self.send_response(rec.status)
            for key, value in {**rec.headers, "content-type": kind}.items():
                self.send_header(key, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.ANTHROPIC_BASE_URL = f"http://127.0.0.1:{server.server_address[1]}"
    settings.ANTHROPIC_API_KEY = "sk-ant-test-key"
    yield rec
    server.shutdown()


BODY = {
    "model": "claude-haiku-4-5",
    "max_tokens": 5,
    "messages": [{"role": "user", "content": "hi"}],
}


def call(job_id: str) -> ProviderOutcome:
    return get_provider().call(ProviderRequest(body=BODY, idempotency_key=job_id))


def test_it_sends_the_job_id_as_idempotency_key_and_the_body_as_given(recorder):
    outcome = call("job-123")
    (request,) = recorder.requests
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert headers["idempotency-key"] == "job-123"
    # SDK 2.x sends the key as a bearer token.
    assert "sk-ant-test-key" in (headers.get("x-api-key") or headers.get("authorization", ""))
    assert request["body"] == {**BODY, "stream": True}  # every call streams
    assert outcome.kind == "success" and outcome.text == "hello"
    assert outcome.request_id == "req_abc"
    assert outcome.usage == {
        "input_tokens": 10,
        "output_tokens": 3,
        "cache_write_5m_tokens": 10,
        "cache_write_1h_tokens": 20,
        "cache_read_tokens": 0,
        "web_search_requests": 0,
    }


def test_the_sdk_never_retries_on_its_own(recorder):
    recorder.status = 503
    recorder.body = {"type": "error", "error": {"type": "api_error", "message": "down"}}
    recorder.headers = {"request-id": "req_x", "x-should-retry": "true", "retry-after": "3"}
    outcome = call("job-1")
    assert len(recorder.requests) == 1
    assert outcome.kind == "error_response" and outcome.http_status == 503
    assert outcome.error_type == "api_error" and outcome.retry_after == 3.0


def test_it_reads_retry_after_and_rate_limit_headers(recorder):
    recorder.status = 429
    recorder.body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}
    recorder.headers = {
        "request-id": "req_y",
        "retry-after": "17",
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
    }
    outcome = call("job-2")
    assert outcome.retry_after == 17.0
    assert outcome.rate_limit_headers["anthropic-ratelimit-requests-limit"] == "50"
    assert "sk-ant" not in outcome.message


def test_a_refused_connection_is_known_not_to_have_been_sent(settings):
    settings.ANTHROPIC_BASE_URL = "http://127.0.0.1:9"
    outcome = call("job-3")
    assert outcome.kind == "connection_error" and not outcome.reached_provider


def test_a_connect_timeout_is_known_not_to_have_been_sent(settings):
    """A listener whose accept queue is full drops new SYNs: the client's connect times out."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=1)  # fills the queue
    try:
        settings.ANTHROPIC_BASE_URL = f"http://127.0.0.1:{port}"
        settings.LLM_PROVIDER_CONNECT_TIMEOUT = 0.3
        outcome = call("job-4")
    finally:
        filler.close()
        listener.close()
    assert outcome.kind == "connection_error" and not outcome.reached_provider
    assert "ConnectTimeout" in outcome.message
