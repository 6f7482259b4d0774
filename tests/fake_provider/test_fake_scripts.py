"""Scripted answers of the fake provider (fake_provider/scripts.py): the next calls, or one
Idempotency-Key's, answer as told and in order, then the configuration resumes."""

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from fake_provider import FakeProviderState
from fake_provider.scripts import KEY_TTL_SECONDS, Scripts, parse_script
from tests.fake_provider.test_fake_provider import (  # noqa: F401  (fixtures)
    ask,
    configure,
    sdk,
    server_url,
    stats,
    url,
)


@pytest.fixture(autouse=True)
def redis_clean() -> Iterator[None]:
    """Neither Redis nor a database."""
    yield


def keyed(key: str) -> dict[str, Any]:
    return {"extra_headers": {"Idempotency-Key": key}}


def test_a_keyed_script_answers_only_that_keys_calls_in_order(url: str) -> None:  # noqa: F811
    active = configure(url, next=["429", "ok", "400"], key="job-a")
    assert active["script"] == {"next": [], "keys": {"job-a": ["429", "ok", "400"]}}
    client = sdk(url)
    assert ask(client, **keyed("job-b")).stop_reason == "end_turn"  # another job: untouched
    with pytest.raises(anthropic.RateLimitError) as limited:
        ask(client, **keyed("job-a"))
    assert limited.value.response.headers["retry-after"] == "1"
    assert ask(client, **keyed("job-a")).stop_reason == "end_turn"
    with pytest.raises(anthropic.BadRequestError):
        ask(client, **keyed("job-a"))
    # Spent: the configuration (no faults) answers again, and the script is gone.
    assert ask(client, **keyed("job-a")).stop_reason == "end_turn"
    assert httpx.get(f"{url}/_fake/faults").json()["script"] == {"next": [], "keys": {}}
    assert stats(url)["by_status"] == {"200": 3, "400": 1, "429": 1}


def test_the_shared_script_answers_anyones_next_calls_before_the_configured_faults(
    url: str,  # noqa: F811
) -> None:
    configure(url, faults={"500": 1.0})
    configure(url, next=["ok", "529"])
    assert httpx.get(f"{url}/_fake/faults").json()["faults"] == {"500": 1.0}  # kept
    client = sdk(url)
    assert ask(client, **keyed("job-x")).stop_reason == "end_turn"  # ok beats the 500 rate
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        ask(client)
    assert overloaded.value.status_code == 529
    with pytest.raises(anthropic.InternalServerError) as configured:
        ask(client)
    assert configured.value.status_code == 500


def test_a_step_may_carry_its_own_latency(url: str) -> None:  # noqa: F811
    configure(url, next=[{"answer": "ok", "latency_ms": 600}], key="slow")
    client = sdk(url)
    started = time.monotonic()
    ask(client, **keyed("slow"))
    assert time.monotonic() - started >= 0.6
    started = time.monotonic()
    ask(client, **keyed("slow"))
    assert time.monotonic() - started < 0.5


def test_a_script_alone_keeps_the_configurations_window(url: str) -> None:  # noqa: F811
    configure(url, faults={"529": 1.0}, for_seconds=30)
    active = configure(url, next=["ok"])
    assert active["faults"] == {"529": 1.0} and active["window_seconds_left"] > 25


def test_reset_and_an_empty_script_clear_scripts(url: str) -> None:  # noqa: F811
    configure(url, next=["400"], key="job-a")
    configure(url, next=["400"], key="job-b")
    assert configure(url, next=[], key="job-a")["script"]["keys"] == {"job-b": ["400"]}
    httpx.post(f"{url}/_fake/reset").raise_for_status()
    assert ask(sdk(url), **keyed("job-b")).stop_reason == "end_turn"


@pytest.mark.parametrize(
    "body",
    [
        {"next": ["nope"]},
        {"next": "429"},
        {"next": [{"answer": "429", "extra": 1}]},
        {"next": [{"answer": "ok", "latency_ms": "x"}]},
        {"next": [True]},
        {"next": ["ok"], "key": ""},
        {"next": ["ok"], "key": 7},
        {"key": "job-a"},
        {"next": ["ok"] * 101},
    ],
)
def test_it_rejects_a_bad_script(url: str, body: dict[str, Any]) -> None:  # noqa: F811
    response = httpx.post(f"{url}/_fake/faults", json=body)
    assert response.status_code == 400 and response.json()["type"] == "error", body
    assert httpx.get(f"{url}/_fake/faults").json()["script"] == {"next": [], "keys": {}}


def test_a_keyed_script_left_unused_lapses() -> None:
    now = [1000.0]
    scripts = Scripts(lambda: now[0])
    scripts.arm(parse_script(["400"]), "cancelled-job")
    scripts.arm(parse_script(["429"]), "later-job")
    now[0] += KEY_TTL_SECONDS - 1
    assert scripts.describe()["keys"] == {"cancelled-job": ["400"], "later-job": ["429"]}
    now[0] += 1
    assert scripts.take("cancelled-job") is None
    assert scripts.describe()["keys"] == {}


def test_the_state_describes_its_scripts() -> None:
    state = FakeProviderState()
    state.scripts.arm(parse_script([{"answer": "529", "latency_ms": "10-20"}, "ok"]), "k")
    assert state.describe()["script"]["keys"] == {
        "k": [{"answer": "529", "latency_ms": "10-20"}, "ok"]
    }
