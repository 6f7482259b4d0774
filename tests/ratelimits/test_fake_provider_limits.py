"""The fake provider's rate limits, as the Messages API has them: requests, input tokens and
output tokens per window, their anthropic-ratelimit-* headers on every answer, a 429 with
retry-after on arrival, and token counts corrected to what the answer used."""

import time
from typing import Any

import httpx
import pytest

from tests.conftest import FakeProvider

MODEL = "claude-sonnet-4-6"


def call(fake: FakeProvider, text: str = "hi", max_tokens: int = 100) -> httpx.Response:
    return fake.http.post(
        "/v1/messages",
        json={"model": MODEL, "max_tokens": max_tokens,
              "messages": [{"role": "user", "content": text}]},
        headers={"x-api-key": "k"},
    )  # fmt: skip


@pytest.fixture
def fake(fake_provider_process: FakeProvider) -> Any:
    fake_provider_process.reset()
    yield fake_provider_process
    fake_provider_process.reset()


def test_it_sends_the_three_limits_and_their_sum_on_every_answer(fake):
    fake.faults({}, rpm=10, itpm=1000, otpm=500, rate_window_seconds=2)
    response = call(fake, "x" * 40, max_tokens=100)
    assert response.status_code == 200
    headers = response.headers
    usage = response.json()["usage"]
    assert headers["anthropic-ratelimit-requests-limit"] == "10"
    assert headers["anthropic-ratelimit-requests-remaining"] == "9"
    assert headers["anthropic-ratelimit-input-tokens-limit"] == "1000"
    assert headers["anthropic-ratelimit-output-tokens-limit"] == "500"
    # Checked on arrival: max_tokens is counted until the answer says what was produced.
    assert headers["anthropic-ratelimit-output-tokens-remaining"] == "400"
    assert int(headers["anthropic-ratelimit-input-tokens-remaining"]) <= 1000 - 10
    assert headers["anthropic-ratelimit-tokens-limit"] == "1500"
    for kind in ("requests", "input-tokens", "output-tokens", "tokens"):
        assert headers[f"anthropic-ratelimit-{kind}-reset"].endswith("Z")
    # The next answer shows the first call's real output, not its max_tokens.
    second = call(fake, max_tokens=100).headers
    expected = 500 - usage["output_tokens"] - 100
    assert second["anthropic-ratelimit-output-tokens-remaining"] == str(expected)


def test_output_tokens_over_the_limit_answer_429_with_retry_after(fake):
    fake.faults({}, otpm=300, rate_window_seconds=2, latency_ms=400)
    assert call(fake, max_tokens=200).status_code == 200  # settles to the few tokens it used
    started = time.monotonic()
    refused = call(fake, max_tokens=295)
    assert time.monotonic() - started < 0.3  # refused on arrival, before the latency
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.headers["retry-after"] in ("1", "2")
    assert refused.headers["anthropic-ratelimit-output-tokens-limit"] == "300"
    assert "anthropic-ratelimit-requests-limit" not in refused.headers  # no rpm set
    time.sleep(2.0)
    assert call(fake, max_tokens=295).status_code == 200


def test_a_request_over_the_requests_limit_is_refused_on_arrival(fake):
    fake.faults({}, rpm=1, rate_window_seconds=1, latency_ms=300)
    assert call(fake).status_code == 200
    assert call(fake).status_code == 429
    time.sleep(1.0)
    assert call(fake).status_code == 200
    assert fake.stats()["by_status"] == {"200": 2, "429": 1}


def test_a_short_interval_enforces_the_rate_over_any_few_seconds_with_room_in_the_headers(fake):
    """--short-interval 1 with 6 per 3 s: at most 2 in any 1 s. The refusal still shows the
    window's room in its headers, as the real API's does: the interval, not the limit, refused."""
    fake.faults({}, rpm=6, rate_window_seconds=3, short_interval_seconds=1)
    assert [call(fake).status_code for _ in range(2)] == [200, 200]
    refused = call(fake)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["anthropic-ratelimit-requests-remaining"] == "4"
    assert "2 requests per 1 s" in refused.json()["error"]["message"]
    time.sleep(1.0)
    assert call(fake).status_code == 200  # a second later the interval has room again
    assert fake.stats()["by_status"] == {"200": 3, "429": 1}
