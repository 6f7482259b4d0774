"""The fake Anthropic provider, driven by the real anthropic SDK over HTTP (no database)."""

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from django.core.management import CommandError, call_command

from fake_provider import FakeProviderState, build_server, create_app

ROOT = Path(__file__).resolve().parents[2]
MODEL = "claude-sonnet-4-6"


@pytest.fixture(autouse=True)
def redis_clean() -> Iterator[None]:
    """Overrides the project-wide Redis flush: these tests need neither Redis nor a database."""
    yield


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    server = build_server(create_app(FakeProviderState(seed=1)), "127.0.0.1", 0)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert server.ready.wait(10), "fake provider did not start"
    yield f"http://127.0.0.1:{server.bound_port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def url(server_url: str) -> str:
    httpx.post(f"{server_url}/_fake/reset").raise_for_status()
    return server_url


def sdk(url: str, read: float = 5) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="test", base_url=url, max_retries=0, timeout=anthropic.Timeout(read, connect=2)
    )


def configure(url: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(f"{url}/_fake/faults", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def stats(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/_fake/stats").json()


def ask(client: anthropic.Anthropic, text: str = "Classify: refund please", **kw: Any) -> Any:
    kw.setdefault("max_tokens", 256)
    kw.setdefault("model", MODEL)
    return client.messages.create(messages=[{"role": "user", "content": text}], **kw)


def test_it_answers_a_normal_message(url: str) -> None:
    raw = sdk(url).messages.with_raw_response.create(
        model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "Hello there"}]
    )
    assert raw.status_code == 200
    assert raw.headers["request-id"].startswith("req_")
    assert raw.headers["content-type"] == "application/json"
    message = raw.parse()
    assert message.id.startswith("msg_") and message.type == "message"
    assert message.role == "assistant" and message.model == MODEL
    assert message.content[0].type == "text"
    assert message.content[0].text.startswith("Fake reply to: Hello there")
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens == 3  # ceil(len("Hello there") / 4)
    assert message.usage.cache_creation_input_tokens == 0
    assert message.usage.cache_creation is not None
    assert message.usage.cache_creation.ephemeral_5m_input_tokens == 0
    body = json.loads(raw.http_response.text)
    assert set(body) == {
        "id",
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
        "usage",
    }
    assert "anthropic-ratelimit-requests-limit" not in raw.headers
    assert stats(url)["by_status"] == {"200": 1}


def test_it_is_deterministic(url: str) -> None:
    client = sdk(url)
    first, second = ask(client, "same question"), ask(client, "same question")
    assert first.content[0].text == second.content[0].text
    assert first.usage == second.usage
    assert first.id != second.id
    assert ask(client, "another question").content[0].text != first.content[0].text


def test_it_stops_at_max_tokens(url: str) -> None:
    message = ask(sdk(url), "tell me a long story", max_tokens=5)
    assert message.stop_reason == "max_tokens"
    assert 1 <= message.usage.output_tokens <= 5
    assert len(message.content[0].text) <= 20


def test_it_writes_then_reads_the_prompt_cache(url: str) -> None:
    client = sdk(url)
    prefix = "You classify support e-mails. " * 40  # 1200 chars = 300 tokens
    system: Any = [
        {"type": "text", "text": prefix, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    ]

    def call(model: str = MODEL, sys_blocks: Any = system) -> Any:
        return client.messages.create(
            model=model,
            max_tokens=64,
            system=sys_blocks,
            messages=[{"role": "user", "content": "Ticket: where is my parcel?"}],
        ).usage

    written = call()
    assert written.cache_creation_input_tokens == 300
    assert written.cache_creation.ephemeral_1h_input_tokens == 300
    assert written.cache_creation.ephemeral_5m_input_tokens == 0
    assert written.cache_read_input_tokens == 0
    assert written.input_tokens == 7  # only the user message
    read = call()
    assert read.cache_read_input_tokens == 300 and read.cache_creation_input_tokens == 0
    assert read.input_tokens == 7
    assert call(model="claude-haiku-4-5").cache_creation_input_tokens == 300  # per model
    five = [{"type": "text", "text": "other prefix", "cache_control": {"type": "ephemeral"}}]
    assert call(sys_blocks=five).cache_creation.ephemeral_5m_input_tokens == 3
    billed = stats(url)["billed"]
    assert billed["cache_creation_input_tokens"] == 603
    assert billed["cache_read_input_tokens"] == 300


ERRORS = [
    ("400", 400, "invalid_request_error", anthropic.BadRequestError, False),
    ("401", 401, "authentication_error", anthropic.AuthenticationError, False),
    ("403", 403, "permission_error", anthropic.PermissionDeniedError, False),
    ("404", 404, "not_found_error", anthropic.NotFoundError, False),
    ("409", 409, "api_error", anthropic.ConflictError, True),
    ("413", 413, "request_too_large", anthropic.ContentTooLargeError, False),
    ("429", 429, "rate_limit_error", anthropic.RateLimitError, True),
    ("500", 500, "api_error", anthropic.InternalServerError, True),
    ("502", 502, "api_error", anthropic.InternalServerError, True),
    ("503", 503, "api_error", anthropic.ServiceUnavailableError, True),
    ("504", 504, "timeout_error", anthropic.GatewayTimeoutError, True),
    ("529", 529, "overloaded_error", anthropic.OverloadedError, True),
    ("context", 400, "invalid_request_error", anthropic.BadRequestError, False),
    ("usagelimit", 400, "invalid_request_error", anthropic.BadRequestError, False),
    ("spendcap", 429, "rate_limit_error", anthropic.RateLimitError, False),
    ("credit", 400, "invalid_request_error", anthropic.BadRequestError, False),
]


@pytest.mark.parametrize("fault,status,error_type,exc_class,retry", ERRORS)
def test_it_injects_each_error_fault(
    url: str, fault: str, status: int, error_type: str, exc_class: type, retry: bool
) -> None:
    configure(url, faults={fault: 1.0})
    with pytest.raises(exc_class) as caught:
        ask(sdk(url))
    exc = caught.value
    assert exc.status_code == status and exc.type == error_type
    headers = exc.response.headers
    assert headers["x-should-retry"] == ("true" if retry else "false")
    assert exc.request_id and exc.request_id.startswith("req_")
    assert exc.body["type"] == "error" and exc.body["request_id"] == exc.request_id
    assert ("retry-after" in headers) == (fault == "429")
    if fault == "503":
        assert exc.api_message == "Service unavailable"
    if fault == "context":
        assert exc.api_message == "prompt is too long: 210000 tokens > 200000 maximum"
    if fault == "credit":
        assert exc.api_message == (
            "Your credit balance is too low to access the Anthropic API. "
            "Please go to Plans & Billing to upgrade or purchase credits."
        )
    if fault == "spendcap":
        assert exc.error_code == "enforced_spend_limit_reached"
        assert exc.api_message == "You have reached your workspace's enforced spend limit."
    else:
        assert exc.error_code is None
    assert stats(url) == {
        "requests": 1,
        "by_status": {str(status): 1},
        "dropped": 0,
        "timed_out": 0,
        "embedded_inputs": 0,
        "in_flight": 0,
        "peak_in_flight": 1,
        "batch_requests": 0,
        "batch_results": {"succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
        "billed": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cost_usd": "0",
            "batch_cost_usd": "0",
        },
        "billed_by_model": {},
    }


def test_it_puts_retry_after_on_an_injected_429(url: str) -> None:
    configure(url, faults={"429": 1.0})
    with pytest.raises(anthropic.RateLimitError) as caught:
        ask(sdk(url))
    headers = caught.value.response.headers
    assert headers["retry-after"] == "1"
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert "anthropic-ratelimit-requests-limit" in headers
    assert headers["anthropic-ratelimit-requests-reset"].endswith("Z")


def test_it_drops_the_connection_after_billing(url: str) -> None:
    configure(url, faults={"drop": 1.0})
    with pytest.raises(anthropic.APIConnectionError) as caught:
        ask(sdk(url))
    assert not isinstance(caught.value, anthropic.APITimeoutError)
    assert "RemoteProtocolError" in repr(caught.value.__cause__)
    seen = stats(url)
    assert seen["requests"] == 1 and seen["dropped"] == 1 and seen["by_status"] == {}
    assert seen["billed"]["output_tokens"] > 0 and Decimal(seen["billed"]["cost_usd"]) > 0


def test_it_trickles_an_answer_a_byte_a_second_and_bills_it_at_once(url: str) -> None:
    """Each byte comes within a 1.5 s read timeout: only a deadline on the whole call ends it.
    The client going away ends the trickle (counted under timed_out)."""
    configure(url, faults={"trickle": 1.0})
    body = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "x"}]}
    timeout = httpx.Timeout(30, read=1.5)
    with httpx.Client(base_url=url, timeout=timeout) as client:
        started = time.monotonic()
        with client.stream(
            "POST", "/v1/messages", json=body, headers={"x-api-key": "test"}
        ) as response:
            assert response.status_code == 200
            assert int(response.headers["content-length"]) > 100
            chunks = response.iter_raw(1)
            received = b"".join(next(chunks) for _ in range(3))
            assert len(received) == 3 and time.monotonic() - started >= 1.5
            billed = httpx.get(f"{url}/_fake/billing").json()["calls"]
            assert [call["how"] for call in billed] == ["trickled"]
    deadline = time.monotonic() + 10
    while stats(url)["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.1)
    seen = stats(url)
    assert seen["in_flight"] == 0 and seen["timed_out"] == 1 and seen["by_status"] == {}


def test_it_answers_garbage_with_a_200_and_bills_it(url: str) -> None:
    configure(url, faults={"garbage": 1.0})
    raw = sdk(url).messages.with_raw_response.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.status_code == 200
    assert raw.headers["content-type"].startswith("text/html")
    assert raw.headers["request-id"].startswith("req_")
    assert raw.http_response.text == "<html>upstream proxy error</html>"
    with pytest.raises(ValueError):
        json.loads(raw.http_response.text)
    # The SDK hands back the text of a body that is not JSON instead of a Message.
    assert raw.parse() == "<html>upstream proxy error</html>"
    seen = stats(url)
    assert seen["requests"] == 1 and seen["by_status"] == {"200": 1}
    assert seen["dropped"] == 0 and seen["timed_out"] == 0
    assert seen["billed"]["output_tokens"] > 0 and Decimal(seen["billed"]["cost_usd"]) > 0


def test_it_times_out_after_billing(url: str) -> None:
    configure(url, faults={"timeout": 1.0})
    started = time.monotonic()
    with pytest.raises(anthropic.APITimeoutError):
        ask(sdk(url, read=0.5))
    assert time.monotonic() - started < 3
    seen = stats(url)
    assert seen["timed_out"] == 1 and seen["by_status"] == {}
    assert seen["billed"]["input_tokens"] > 0 and seen["billed"]["output_tokens"] > 0


def test_it_limits_requests_per_minute(url: str) -> None:
    configure(url, rpm=3)
    client = sdk(url)
    for left in (2, 1, 0):
        raw = client.messages.with_raw_response.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
        assert raw.headers["anthropic-ratelimit-requests-limit"] == "3"
        assert raw.headers["anthropic-ratelimit-requests-remaining"] == str(left)
    with pytest.raises(anthropic.RateLimitError) as caught:
        ask(client)
    headers = caught.value.response.headers
    assert 58 <= int(headers["retry-after"]) <= 60
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert headers["x-should-retry"] == "true"
    assert stats(url)["by_status"] == {"200": 3, "429": 1}


def test_it_reverts_faults_after_the_window(url: str) -> None:
    active = configure(url, faults={"529": 1.0}, for_seconds=1)
    assert active["faults"] == {"529": 1.0} and active["window_seconds_left"] > 0
    with pytest.raises(anthropic.OverloadedError):
        ask(sdk(url))
    time.sleep(1.1)
    assert ask(sdk(url)).stop_reason == "end_turn"
    assert httpx.get(f"{url}/_fake/faults").json()["faults"] == {}


def test_it_rejects_a_bad_control_body(url: str) -> None:
    for body in ({"faults": {"999": 1}}, {"faults": {"529": 2}}, {"nope": 1}, {"rpm": "x"}):
        response = httpx.post(f"{url}/_fake/faults", json=body)
        assert response.status_code == 400 and response.json()["type"] == "error"
    assert httpx.post(f"{url}/_fake/faults", content=b"{not json").status_code == 400


def test_it_resets_stats_and_cache(url: str) -> None:
    configure(url, faults={"500": 0.0}, latency_ms="0-1", rpm=100)
    system: Any = [
        {"type": "text", "text": "cached prefix", "cache_control": {"type": "ephemeral"}}
    ]
    ask(sdk(url), system=system)
    assert stats(url)["requests"] == 1
    reset = httpx.post(f"{url}/_fake/reset").json()
    assert reset["rpm"] is None and reset["latency_ms"] == "0"
    assert stats(url) == {
        "requests": 0,
        "by_status": {},
        "dropped": 0,
        "timed_out": 0,
        "embedded_inputs": 0,
        "in_flight": 0,
        "peak_in_flight": 0,
        "batch_requests": 0,
        "batch_results": {"succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
        "billed": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cost_usd": "0",
            "batch_cost_usd": "0",
        },
        "billed_by_model": {},
    }
    assert ask(sdk(url), system=system).usage.cache_creation_input_tokens == 4  # written again


def test_it_bills_with_its_price_list(url: str) -> None:
    usage = ask(sdk(url), model="claude-opus-4-1").usage
    expected = (usage.input_tokens * Decimal(15) + usage.output_tokens * Decimal(75)) / 10**6
    assert Decimal(stats(url)["billed"]["cost_usd"]) == expected


def test_it_logs_each_billed_call_with_its_idempotency_key_and_how_it_ended(url: str) -> None:
    client = sdk(url)
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "Hello"}],
        extra_headers={"Idempotency-Key": "job-1"},
    )
    configure(url, faults={"drop": 1.0})
    with pytest.raises(anthropic.APIConnectionError):
        ask(client, extra_headers={"Idempotency-Key": "job-2"})
    configure(url, faults={"529": 1.0})
    with pytest.raises(anthropic.InternalServerError):
        ask(client, extra_headers={"Idempotency-Key": "job-3"})  # an error bills nothing

    log = httpx.get(f"{url}/_fake/billing").json()
    assert log["evicted"] == 0
    assert [(c["idempotency_key"], c["how"]) for c in log["calls"]] == [
        ("job-1", "answered"),
        ("job-2", "dropped"),
    ]
    assert log["calls"][0]["request_id"] == raw.headers["request-id"]
    total = sum(Decimal(c["cost_usd"]) for c in log["calls"])
    assert total == Decimal(stats(url)["billed"]["cost_usd"]) > 0
    httpx.post(f"{url}/_fake/reset").raise_for_status()
    assert httpx.get(f"{url}/_fake/billing").json() == {"calls": [], "evicted": 0}


def test_it_serves_200_concurrent_requests(url: str) -> None:
    # Long calls: all 200 are sent well within one, however slowly a loaded machine sends them.
    configure(url, latency_ms=3000)

    async def run() -> list[int]:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=20) as client:
            body = {"model": MODEL, "max_tokens": 32}

            async def one(i: int) -> int:
                messages = [{"role": "user", "content": f"request {i}"}]
                response = await client.post(
                    "/v1/messages", json={**body, "messages": messages}, headers={"x-api-key": "k"}
                )
                return response.status_code

            return await asyncio.gather(*(one(i) for i in range(200)))

    statuses = asyncio.run(run())
    assert statuses == [200] * 200
    assert stats(url)["by_status"] == {"200": 200}
    assert stats(url)["peak_in_flight"] == 200, "the 200 calls were not all handled at once"


def test_it_counts_the_calls_in_flight_and_their_peak(url: str) -> None:
    configure(url, latency_ms=1500)
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}

    def one() -> int:
        response = httpx.post(
            f"{url}/v1/messages", json=body, headers={"x-api-key": "k"}, timeout=10
        )
        return response.status_code

    threads = [threading.Thread(target=one) for _ in range(12)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while stats(url)["in_flight"] < 12:
        assert time.monotonic() < deadline, stats(url)
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    seen = stats(url)
    assert (seen["in_flight"], seen["peak_in_flight"], seen["by_status"]) == (0, 12, {"200": 12})
    one()
    assert stats(url)["peak_in_flight"] == 12  # the most at once, not the latest
    httpx.post(f"{url}/_fake/reset").raise_for_status()
    assert stats(url)["peak_in_flight"] == 0


def test_it_requires_an_api_key(url: str) -> None:
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(f"{url}/v1/messages", json=body)
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert response.headers["request-id"] == response.json()["request_id"]
    bearer = httpx.post(f"{url}/v1/messages", json=body, headers={"authorization": "Bearer x"})
    assert bearer.status_code == 200


def test_it_validates_requests_like_anthropic(url: str) -> None:
    client = sdk(url)
    with pytest.raises(anthropic.NotFoundError) as caught:
        ask(client, model="claude-nonexistent")
    assert caught.value.type == "not_found_error"
    assert caught.value.api_message == "model: claude-nonexistent"
    assert ask(client, model="claude-haiku-4-5-20251001").model == "claude-haiku-4-5-20251001"
    headers = {"x-api-key": "k"}
    hi = [{"role": "user", "content": "x"}]
    for body, message in [
        ({"model": MODEL, "messages": hi}, "max_tokens: Field required"),
        ({"model": MODEL, "max_tokens": 8}, "messages: Field required"),
        ({"max_tokens": 8, "messages": []}, "model: Field required"),
        (
            {"model": MODEL, "max_tokens": 0, "messages": hi},
            "max_tokens: Input should be greater than or equal to 1",
        ),
        (
            {"model": MODEL, "max_tokens": 8, "messages": []},
            "messages: at least one message is required",
        ),
    ]:
        response = httpx.post(f"{url}/v1/messages", json=body, headers=headers)
        assert response.status_code == 400
        assert response.json()["error"] == {"type": "invalid_request_error", "message": message}
    bad = httpx.post(f"{url}/v1/messages", content=b"{", headers=headers)
    assert bad.status_code == 400 and bad.headers["x-should-retry"] == "false"


def test_it_repeats_fault_draws_with_a_seed() -> None:
    def draws(seed: int) -> list[Any]:
        state = FakeProviderState(
            faults=[("529", 0.3), ("drop", 0.2)], latency_ms="20-400", seed=seed
        )
        return [(state.draw_fault(), state.draw_latency()) for _ in range(50)]

    assert draws(7) == draws(7) != draws(8)
    faults = [fault for fault, _ in draws(7)]
    assert {"529", "drop", None} == set(faults)
    assert all(0.02 <= delay <= 0.4 for _, delay in draws(7))


def test_it_rejects_bad_command_options() -> None:
    for args, needle in [
        (["--latency-ms", "fast"], "--latency-ms"),
        (["--latency-ms", "400-20"], "--latency-ms"),
        (["--rpm", "0"], "--rpm"),
        (["--rpm", "lots"], "--rpm"),
        (["--fault", "529"], "CODE:RATE"),
        (["--fault", "999:0.1"], "unknown fault code"),
        (["--fault", "529:1.5"], "0..1"),
        (["--port", "70000"], "--port"),
        (["--seed", "abc"], "--seed"),
    ]:
        with pytest.raises(CommandError, match=needle):
            call_command("fake_anthropic", *args)


def test_it_starts_from_the_management_command() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "fake_anthropic",
            "--port",
            "0",
            "--rpm",
            "60",
            "--fault",
            "529:0.5",
            "--fault",
            "drop:0.05",
            "--seed",
            "3",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert line.startswith("fake anthropic provider listening on http://127.0.0.1:"), line
        assert line.endswith("(rpm=60, faults=529:0.5,drop:0.05)")
        address = line.split()[5]
        assert httpx.get(f"{address}/_fake/health").json() == {"ok": True}
        assert httpx.get(f"{address}/_fake/faults").json()["faults"] == {"529": 0.5, "drop": 0.05}
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_call_in_flight_across_a_reset_is_not_counted_after_it(url: str) -> None:
    """A slow call from before a reset (an earlier test's, a killed worker's) must not show up
    in the counters or the bill that the reset started."""
    configure(url, latency_ms="1500")
    answered: list[Any] = []
    thread = threading.Thread(target=lambda: answered.append(ask(sdk(url))))
    thread.start()
    deadline = time.monotonic() + 5
    while stats(url)["requests"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    httpx.post(f"{url}/_fake/reset").raise_for_status()
    thread.join(timeout=10)
    assert answered and answered[0].content  # the caller still gets its answer
    after = stats(url)
    assert after["requests"] == 0 and after["by_status"] == {}
    assert after["billed"]["cost_usd"] == "0"
