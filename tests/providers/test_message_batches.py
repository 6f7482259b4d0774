"""The Message Batches client (providers/message_batches.py) against the fake provider's Message
Batches API over HTTP, through the real anthropic SDK: no mocks."""

import json
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jobs.retry_policy import classify
from providers.base import ProviderRequest
from providers.message_batches import (
    BatchApiError,
    BatchInfo,
    BatchItemResult,
    BatchRequest,
    batch_cancel,
    batch_create,
    batch_results,
    batch_retrieve,
    batches_supported,
    split_requests,
)
from providers.registry import get_provider
from providers.services import provider_save
from tests.conftest import FakeProvider, _free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

MODEL = "claude-sonnet-4-6"
SECRET = "sk-ant-api03-batch-test-secret-0123456789"


@pytest.fixture
def fake(fake_provider: FakeProvider) -> FakeProvider:
    """The fake provider, reset, with batches that take half a second."""
    configure(fake_provider, batch_processing_seconds=0.5)
    return fake_provider


def configure(fake: FakeProvider, **body: Any) -> None:
    response = fake.http.post("/_fake/faults", json=body)
    assert response.status_code == 200, response.text


def params(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 128,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def requests(count: int, prefix: str = "item") -> list[BatchRequest]:
    return [BatchRequest(f"{prefix}-{i}", params(f"Classify ticket {i}")) for i in range(count)]


def ended(batch_id: str, provider_name: str = "anthropic", seconds: float = 20) -> BatchInfo:
    deadline = time.monotonic() + seconds
    while not (batch := batch_retrieve(provider_name=provider_name, batch_id=batch_id)).ended:
        assert time.monotonic() < deadline, f"{batch_id} did not end in {seconds} s"
        time.sleep(0.05)
    return batch


def results(batch_id: str, provider_name: str = "anthropic") -> dict[str, BatchItemResult]:
    return {
        item.custom_id: item
        for item in batch_results(provider_name=provider_name, batch_id=batch_id)
    }


def test_a_batch_is_created_ends_and_its_results_carry_text_and_usage_as_a_call_would(fake):
    texts = {f"q-{i}": f"Summarise order number {i}" for i in range(4)}
    batch = [BatchRequest(custom_id, params(text)) for custom_id, text in texts.items()]
    # A job body may say "stream": a batch request never streams, so it is left out.
    batch[0] = BatchRequest("q-0", params(texts["q-0"], stream=True))

    created = batch_create(provider_name="anthropic", requests=batch)
    assert created.id.startswith("msgbatch_") and created.processing_status == "in_progress"
    assert not created.ended and created.ended_at is None
    assert created.request_counts == {
        "processing": 4,
        "succeeded": 0,
        "errored": 0,
        "canceled": 0,
        "expired": 0,
    }
    assert isinstance(created.created_at, datetime) and created.expires_at is not None
    assert created.expires_at - created.created_at == timedelta(hours=24)

    done = ended(created.id)
    assert done.request_counts["succeeded"] == 4 and done.request_counts["processing"] == 0
    assert done.ended_at is not None and done.ended_at > created.created_at

    items = results(created.id)
    assert set(items) == set(texts)
    for custom_id, text in texts.items():
        item = items[custom_id]
        direct = get_provider().call(ProviderRequest(body=params(text), idempotency_key=custom_id))
        assert direct.kind == "success"
        assert item.type == "succeeded" and item.model == MODEL
        assert item.text == direct.text and item.text
        assert item.content == direct.content and item.stop_reason == direct.stop_reason
        assert item.usage == direct.usage  # the same keys and counts as a job's attempt
        assert item.http_status is None and item.error_type == ""
    assert len(fake.http.get("/_fake/billing").json()["calls"]) == 8  # 4 batch items, 4 calls


def test_errored_items_carry_a_status_the_retry_table_retries_and_expired_ones_say_expired(
    fake,
):
    configure(fake, batch_errored_rate=0.3, batch_expired_rate=0.3)
    batch = requests(40)
    batch.append(BatchRequest("unknown-model", params("hi", model="claude-nonexistent")))
    created = batch_create(provider_name="anthropic", requests=batch)
    counts = ended(created.id).request_counts
    items = results(created.id)
    assert len(items) == 41

    unknown = items.pop("unknown-model")
    assert (unknown.type, unknown.error_type, unknown.http_status) == (
        "errored",
        "not_found_error",
        404,
    )
    assert not classify(
        kind="error_response", http_status=unknown.http_status, error_type=unknown.error_type
    ).transient
    by_type: dict[str, list[BatchItemResult]] = {}
    for item in items.values():
        by_type.setdefault(item.type, []).append(item)
    assert len(by_type["errored"]) == counts["errored"] - 1 > 0
    assert len(by_type["expired"]) == counts["expired"] > 0
    assert len(by_type["succeeded"]) == counts["succeeded"] > 0
    for item in by_type["errored"]:
        expected = {"api_error": 500, "overloaded_error": 529}[item.error_type]
        assert item.http_status == expected and item.error_message
        classification = classify(
            kind="error_response", http_status=item.http_status, error_type=item.error_type
        )
        assert classification.transient, classification
        assert item.usage is None and item.text == ""
    for item in by_type["expired"]:
        assert item.http_status is None and item.usage is None and item.content is None


def test_a_cancelled_batch_ends_with_its_unfinished_items_canceled(fake):
    configure(fake, batch_processing_seconds=3600)  # nothing ends on its own during the test
    created = batch_create(provider_name="anthropic", requests=requests(3, "slow"))
    canceling = batch_cancel(provider_name="anthropic", batch_id=created.id)
    assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at
    done = ended(created.id)
    assert done.request_counts["canceled"] == 3
    items = results(created.id)
    assert sorted(items) == ["slow-0", "slow-1", "slow-2"]
    assert {item.type for item in items.values()} == {"canceled"}

    with pytest.raises(BatchApiError) as caught:
        batch_cancel(provider_name="anthropic", batch_id=created.id)
    assert caught.value.http_status == 400 and not caught.value.retryable
    assert "already ended" in caught.value.message


def test_results_before_the_batch_ends_are_refused_until_it_has_ended(fake):
    configure(fake, batch_processing_seconds=3600)
    created = batch_create(provider_name="anthropic", requests=requests(1))
    with pytest.raises(BatchApiError) as caught:
        batch_results(provider_name="anthropic", batch_id=created.id)
    assert caught.value.reason == "batch_not_ended" and caught.value.retryable
    assert "in_progress" in caught.value.message


def test_an_unknown_batch_is_a_404_that_is_not_retried(fake):
    with pytest.raises(BatchApiError) as caught:
        batch_retrieve(provider_name="anthropic", batch_id="msgbatch_unknown")
    error = caught.value
    assert (error.http_status, error.error_type, error.reason) == (
        404,
        "not_found_error",
        "not_found",
    )
    assert not error.retryable and error.request_id.startswith("req_")


def test_a_closed_port_is_a_connection_error_that_is_retried(fake, settings):
    port = _free_port()
    settings.ANTHROPIC_BASE_URL = f"http://127.0.0.1:{port}/path-token"
    calls: list[Callable[[], Any]] = [
        lambda: batch_create(provider_name="anthropic", requests=requests(1)),
        lambda: batch_retrieve(provider_name="anthropic", batch_id="msgbatch_x"),
        lambda: batch_cancel(provider_name="anthropic", batch_id="msgbatch_x"),
        lambda: batch_results(provider_name="anthropic", batch_id="msgbatch_x"),
    ]
    for call in calls:
        with pytest.raises(BatchApiError) as caught:
            call()
        error = caught.value
        assert error.reason == "connection_error" and error.retryable
        assert error.http_status is None and not error.outcome_unknown  # it never left
        assert error.message.startswith(f"ConnectError: could not connect to 127.0.0.1:{port}")
        assert "path-token" not in error.message


class Peer:
    """An HTTP server answering every call as ``mode`` says, for what the fake provider does not
    do: ``wrong_key`` answers as the API answers a wrong key (the fake takes any key), its message
    echoing the key sent, so that the test sees it redacted; ``drop`` closes the connection
    unanswered; ``stall`` answers after two seconds; ``html`` answers 200 with a proxy's page."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.keys: list[str] = []
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                bearer = self.headers.get("authorization", "").removeprefix("Bearer ")
                key = self.headers.get("x-api-key") or bearer  # this SDK sends a bearer
                peer.keys.append(key)
                if peer.mode == "drop":
                    return  # the server closes the connection
                if peer.mode == "stall":
                    time.sleep(2)
                status, kind, body = 200, "text/html", b"<html>502 Bad Gateway</html>"
                if peer.mode == "wrong_key":
                    error = {"type": "authentication_error", "message": f"invalid x-api-key {key}"}
                    status, kind = 401, "application/json"
                    body = json.dumps({"type": "error", "error": error}).encode()
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("request-id", "req_peer")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = answer  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"


@contextmanager
def peer(mode: str, settings: Any) -> Iterator[Peer]:
    """A peer in ``mode``, the default provider's base URL."""
    server = Peer(mode)
    thread = threading.Thread(target=server.http.serve_forever, daemon=True)
    thread.start()
    settings.ANTHROPIC_BASE_URL = server.url
    try:
        yield server
    finally:
        server.http.shutdown()
        server.http.server_close()


def test_a_wrong_key_is_a_401_that_is_not_retried_and_never_shows_the_key(settings, monkeypatch):
    settings.ANTHROPIC_API_KEY = SECRET
    monkeypatch.setenv("CLAUDE_EU_API_KEY", SECRET + "-eu")
    provider_save(name="claude-eu", kind="anthropic", api_key_env="CLAUDE_EU_API_KEY")
    calls: list[Callable[[], Any]] = [
        lambda: batch_create(provider_name="anthropic", requests=requests(1)),
        lambda: batch_retrieve(provider_name="anthropic", batch_id="msgbatch_x"),
        lambda: batch_cancel(provider_name="anthropic", batch_id="msgbatch_x"),
        lambda: batch_results(provider_name="anthropic", batch_id="msgbatch_x"),
        lambda: batch_retrieve(provider_name="claude-eu", batch_id="msgbatch_x"),
    ]
    with peer("wrong_key", settings) as wrong_key:
        for call in calls:
            with pytest.raises(BatchApiError) as caught:
                call()
            error = caught.value
            assert (error.http_status, error.error_type) == (401, "authentication_error")
            assert error.reason == "authentication_failed" and not error.retryable
            assert error.request_id == "req_peer"
            assert "invalid x-api-key [redacted]" in error.message
            # Not in the error, nor in what a logger prints of it (the SDK's exception, whose
            # request holds the key in its headers, is not kept).
            shown = "".join(traceback.format_exception(error)) + repr(error) + repr(vars(error))
            assert "sk-ant" not in shown and SECRET not in shown
            assert error.__cause__ is None and error.__context__ is None
    # Each provider row's key, from the variable it names (claude-eu's base URL: the default).
    assert wrong_key.keys == [SECRET] * 4 + [SECRET + "-eu"]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("drop", "connection_dropped"), ("stall", "read_timeout"), ("html", "unreadable")],
)
def test_a_create_left_unanswered_is_retried_knowing_the_batch_may_exist(
    settings, monkeypatch, mode, reason
):
    settings.LLM_DEFERRED_READ_TIMEOUT_SECONDS = 0.5
    with peer(mode, settings) as server:
        with pytest.raises(BatchApiError) as created:
            batch_create(provider_name="anthropic", requests=requests(1))
        with pytest.raises(BatchApiError) as read:
            batch_retrieve(provider_name="anthropic", batch_id="msgbatch_x")
    assert len(server.keys) == 2  # each request arrived, once: the SDK does not retry
    for error in (created.value, read.value):
        assert error.reason == reason and error.retryable and error.http_status is None
    assert created.value.outcome_unknown  # look for the batch before creating it again
    assert not read.value.outcome_unknown  # a read changes nothing


def test_a_provider_row_of_kind_anthropic_has_its_own_base_url(fake, settings):
    provider_save(name="claude-direct", kind="anthropic", base_url=fake.url)
    settings.ANTHROPIC_BASE_URL = f"http://127.0.0.1:{_free_port()}"  # not the row's
    created = batch_create(provider_name="claude-direct", requests=requests(2))
    ended(created.id, provider_name="claude-direct")
    assert set(results(created.id, provider_name="claude-direct")) == {"item-0", "item-1"}


def test_batches_are_supported_by_anthropic_providers_only(fake):
    provider_save(name="local-openai", kind="openai", base_url=f"{fake.url}/openai/v1")
    provider_save(name="claude-eu", kind="anthropic", base_url=fake.url)
    assert batches_supported("anthropic") and batches_supported("claude-eu")
    assert not batches_supported("local-openai")
    assert not batches_supported("no-such-provider")
    with pytest.raises(LookupError, match="no Message Batches API"):
        batch_create(provider_name="local-openai", requests=requests(1))


def _encoded(chunk: list[BatchRequest]) -> int:
    return len(
        json.dumps({"requests": [{"custom_id": r.custom_id, "params": r.params} for r in chunk]})
    )


def test_split_requests_keeps_the_order_within_the_count_limit():
    batch = requests(10)
    chunks = split_requests(batch, max_requests=4)
    assert [len(chunk) for chunk in chunks] == [4, 4, 2]
    assert [r for chunk in chunks for r in chunk] == batch
    assert split_requests(batch) == [batch]
    assert split_requests([]) == []


def test_split_requests_keeps_the_order_within_the_byte_limit():
    # Sizes that vary, with non-ASCII text (its escapes count, as JSON may send them).
    batch = [
        BatchRequest(f"r-{i}", params("é" * (i * 37 % 500) + f"question {i}")) for i in range(60)
    ]
    limit = 8_000
    chunks = split_requests(batch, max_bytes=limit)
    assert len(chunks) > 3
    assert [r for chunk in chunks for r in chunk] == batch
    for chunk, following in zip(chunks, chunks[1:] + [[]], strict=True):
        assert _encoded(chunk) <= limit
        if following:  # full: the next request would not have fitted
            assert _encoded([*chunk, following[0]]) > limit


def test_split_requests_refuses_a_request_no_batch_can_hold():
    batch = [BatchRequest("small", params("hi")), BatchRequest("huge", params("x" * 5_000))]
    with pytest.raises(ValueError, match="'huge' alone is"):
        split_requests(batch, max_bytes=2_000)


def test_split_requests_drops_stream_as_the_create_does():
    streamed = BatchRequest("s", params("hi", stream=True))
    plain = BatchRequest("s", params("hi"))
    limit = _encoded([plain])
    assert split_requests([streamed], max_bytes=limit) == [[streamed]]
