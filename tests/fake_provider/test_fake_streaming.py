"""The fake provider's streamed answers (``"stream": true``), read by the official SDK's stream
as the worker will: the API's event order, pings, usage in ``message_start`` and
``message_delta``, a 40,000-token generation, faults inside the stream (an ``overloaded_error``
event, a stall without pings, a dropped connection) billed for what streamed before them."""

import time
from collections.abc import Iterator
from decimal import Decimal

import anthropic
import anthropic._streaming as sdk_streaming
import httpx
import httpx2
import openai
import pytest

from tests.fake_provider.test_fake_provider import (  # noqa: F401  (fixtures)
    MODEL,
    configure,
    sdk,
    server_url,
    stats,
    url,
)


@pytest.fixture(autouse=True)
def redis_clean() -> Iterator[None]:
    """Overrides the project-wide Redis flush: these tests need neither Redis nor a database."""
    yield


def stream_events(client: anthropic.Anthropic, text: str, max_tokens: int = 256) -> list:
    with client.messages.create(
        model=MODEL,
        max_tokens=max_tokens,
        messages=[{"role": "user", "content": text}],
        stream=True,
    ) as stream:
        return list(stream)


def read_stream(client: anthropic.Anthropic, *, tokens: int, into: list) -> None:
    """Stream a reply of ``tokens`` output tokens into ``into``, event by event: what arrived
    before an error stays there for the test to read."""
    with client.messages.create(
        model=MODEL,
        max_tokens=4000,
        stream=True,
        messages=[{"role": "user", "content": f"fake_output_tokens={tokens}"}],
    ) as stream:
        for event in stream:
            into.append(event)


def billing(base: str) -> list[dict]:
    return httpx.get(f"{base}/_fake/billing").json()["calls"]


def test_a_stream_has_the_apis_events_and_equals_the_whole_answer(url: str) -> None:  # noqa: F811
    client = sdk(url)
    whole = client.messages.create(
        model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "Classify: refund"}]
    )
    events = stream_events(client, "Classify: refund")
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    start, delta = events[0].message, events[-2]
    assert start.usage.input_tokens == whole.usage.input_tokens and start.usage.output_tokens == 1
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == whole.content[0].text
    assert delta.delta.stop_reason == "end_turn"
    assert delta.usage.output_tokens == whole.usage.output_tokens
    # Billed as the whole answer, once.
    calls = billing(url)
    assert [c["how"] for c in calls] == ["answered", "answered"]
    assert calls[0]["cost_usd"] == calls[1]["cost_usd"]


def test_the_sdks_message_stream_accumulates_the_same_message(url: str) -> None:  # noqa: F811
    client = sdk(url)
    with client.messages.stream(
        model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "Summarise: late"}]
    ) as stream:
        final = stream.get_final_message()
    whole = client.messages.create(
        model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "Summarise: late"}]
    )
    assert final.content[0].text == whole.content[0].text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.stop_reason == "end_turn"


def test_a_forty_thousand_token_generation_streams_in_one_call(url: str) -> None:  # noqa: F811
    events = stream_events(sdk(url), "fake_output_tokens=40000 please", max_tokens=64_000)
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert len(text) == 160_000
    assert events[-2].usage.output_tokens == 40_000
    assert events[-2].delta.stop_reason == "end_turn"
    assert stats(url)["requests"] == 1
    # Cut by max_tokens like any answer.
    cut = stream_events(sdk(url), "fake_output_tokens=40000 please", max_tokens=1000)
    assert cut[-2].delta.stop_reason == "max_tokens" and cut[-2].usage.output_tokens == 1000


def test_a_slow_stream_sends_pings_while_it_works(url: str) -> None:  # noqa: F811
    configure(url, stream_tokens_per_second=20)
    seen: list[str] = []
    with httpx.stream(
        "POST",
        f"{url}/v1/messages",
        headers={"x-api-key": "k"},
        json={
            "model": MODEL,
            "max_tokens": 400,
            "stream": True,
            "messages": [{"role": "user", "content": "fake_output_tokens=250"}],
        },
        timeout=60,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for sse in sdk_streaming.SSEDecoder().iter_bytes(response.iter_bytes()):
            seen.append(sse.event or "")
    # 250 tokens at 20 a second: more than 10 s, so a ping beyond the one after the first block.
    assert seen.count("ping") >= 2
    assert seen[-1] == "message_stop"


def test_an_overloaded_error_mid_stream_is_the_sdks_529_and_bills_what_streamed(url: str) -> None:  # noqa: F811
    configure(url, faults={"overloaded_midstream": 1.0})
    client = sdk(url)
    streamed = []
    with pytest.raises(anthropic.APIStatusError) as error:
        read_stream(client, tokens=2000, into=streamed)
    assert "overloaded_error" in str(error.value)
    text = "".join(e.delta.text for e in streamed if e.type == "content_block_delta")
    assert 0 < len(text) < 8000
    (call,) = billing(url)
    assert call["how"] == "error_event"
    assert call["output_tokens"] == -(-len(text) // 4)
    # Without a stream the same fault is a plain 529.
    with pytest.raises(anthropic.InternalServerError) as plain:
        client.messages.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        )
    assert plain.value.status_code == 529


def test_a_stall_sends_nothing_more_and_only_an_idle_bound_ends_it(url: str) -> None:  # noqa: F811
    configure(url, faults={"stall": 1.0})
    client = sdk(url, read=2)  # the read timeout as the idle bound
    streamed = []
    started = time.monotonic()
    # Read mid-stream, the transport's own error: the SDK wraps only what happens before.
    with pytest.raises((anthropic.APITimeoutError, httpx2.ReadTimeout)):
        read_stream(client, tokens=1000, into=streamed)
    assert 2 <= time.monotonic() - started < 10
    assert streamed and streamed[0].type == "message_start"
    time.sleep(0.3)  # the fake notices the client went away
    (call,) = billing(url)
    assert call["how"] == "stalled" and 0 < call["output_tokens"] < 1000


def test_a_dropped_stream_is_a_connection_error_billed_for_what_streamed(url: str) -> None:  # noqa: F811
    configure(url, faults={"drop": 1.0})
    streamed = []
    with pytest.raises((anthropic.APIConnectionError, httpx2.RemoteProtocolError)):
        read_stream(sdk(url), tokens=1000, into=streamed)
    assert streamed
    time.sleep(0.2)
    (call,) = billing(url)
    assert call["how"] == "dropped" and 0 < call["output_tokens"] < 1000
    assert stats(url)["dropped"] == 1


def test_a_client_that_leaves_mid_stream_is_billed_for_what_streamed(url: str) -> None:  # noqa: F811
    configure(url, stream_tokens_per_second=200)
    with sdk(url).messages.create(
        model=MODEL,
        max_tokens=4000,
        stream=True,
        messages=[{"role": "user", "content": "fake_output_tokens=2000"}],
    ) as stream:
        for e in stream:
            if e.type == "content_block_delta":
                break
    time.sleep(0.5)
    (call,) = billing(url)
    assert call["how"] == "client_gone" and 0 < call["output_tokens"] < 2000
    assert Decimal(call["cost_usd"]) > 0


def test_fake_stream_seconds_in_the_prompt_spreads_the_answer_over_that_long(url: str) -> None:  # noqa: F811
    """A prompt alone asks for a call long enough to watch or to cancel (the README's examples),
    on either API, whatever the configuration: the same answer, in pieces about a second apart."""
    prompt = "Write the report. fake_stream_seconds=3"
    whole = sdk(url).messages.create(
        model=MODEL, max_tokens=256, messages=[{"role": "user", "content": prompt}]
    )
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    with sdk(url).messages.create(
        model=MODEL, max_tokens=256, stream=True, messages=[{"role": "user", "content": prompt}]
    ) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                arrivals.append((time.monotonic(), event.delta.text))
    lasted = time.monotonic() - started  # the pause after the last piece included
    assert "".join(text for _, text in arrivals) == whole.content[0].text
    assert 2.8 < lasted < 5.0, lasted
    gaps = [later[0] - earlier[0] for earlier, later in zip(arrivals, arrivals[1:], strict=False)]
    assert max(gaps) < 1.5, gaps

    chat = openai.OpenAI(api_key="k", base_url=f"{url}/openai/v1", max_retries=0)
    started = time.monotonic()
    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in chat.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "Summarise it. fake_stream_seconds=2"}],
            stream=True,
        )
        if chunk.choices
    ]
    assert 1.5 < time.monotonic() - started < 4.0
    assert len([piece for piece in pieces if piece]) >= 2
