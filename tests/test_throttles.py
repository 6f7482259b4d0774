"""Per-user submit throttling (api/submit_throttles.py): 429 ``throttled`` with ``Retry-After`` past
the rate, one count per user shared by every process (real Redis, real separate processes and
the Procfile's web line in two worker processes), reads never throttled, off when configured,
and open when Redis is down (submit keeps answering 202)."""

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import django_rq
import httpx
import pytest

from api.throttle_rates import parse_rate
from jobs.models import LlmJob
from keys.testing import api_key_for
from llmops.queues import throttle_key
from tests.conftest import ROOT, job_body, make_user
from tests.jobs.test_outages import redis_down
from tests.test_deploy_settings import settings_check_errors, settings_in


def post(client: Any) -> Any:
    return client.post("/api/v1/jobs/", job_body(), format="json")


@pytest.mark.django_db
@pytest.mark.usefixtures("prices")
def test_it_answers_429_throttled_with_retry_after_past_the_rate(alice_client, settings):
    settings.LLM_SUBMIT_THROTTLE_RATE = "3/min"

    accepted = [post(alice_client).status_code for _ in range(3)]
    refused = post(alice_client)

    assert accepted == [202, 202, 202]
    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == "throttled"
    assert body["message"].startswith("Request was throttled.")
    assert set(body) == {"code", "message", "detail"}
    # At most the rest of this minute plus the part of the next one in which this minute's
    # three still weigh more than two (the sliding window counts them as spread over it).
    assert 1 <= int(refused["Retry-After"]) <= 60 + 60 // 3
    assert LlmJob.objects.count() == 3


@pytest.mark.django_db
@pytest.mark.usefixtures("prices")
def test_each_user_has_a_rate_of_their_own(alice_client, bob_client, settings):
    settings.LLM_SUBMIT_THROTTLE_RATE = "2/min"
    for _ in range(2):
        assert post(alice_client).status_code == 202

    assert post(alice_client).status_code == 429
    assert post(bob_client).status_code == 202


@pytest.mark.django_db
@pytest.mark.usefixtures("prices")
def test_reading_the_list_is_never_throttled(alice_client, settings):
    settings.LLM_SUBMIT_THROTTLE_RATE = "1/min"
    assert post(alice_client).status_code == 202
    assert post(alice_client).status_code == 429

    assert alice_client.get("/api/v1/jobs/").status_code == 200


@pytest.mark.django_db
@pytest.mark.usefixtures("prices")
def test_a_refused_submit_is_accepted_again_after_retry_after(alice_client, settings):
    settings.LLM_SUBMIT_THROTTLE_RATE = "2/s"
    assert [post(alice_client).status_code for _ in range(2)] == [202, 202]
    refused = post(alice_client)
    assert refused.status_code == 429
    retry_after = int(refused["Retry-After"])
    assert 1 <= retry_after <= 2

    time.sleep(retry_after)

    assert post(alice_client).status_code == 202


@pytest.mark.django_db
@pytest.mark.usefixtures("prices")
def test_off_turns_the_throttle_off_without_touching_redis(alice_client, settings):
    settings.LLM_SUBMIT_THROTTLE_RATE = "off"

    assert [post(alice_client).status_code for _ in range(5)] == [202] * 5
    assert django_rq.get_connection("llm").keys(throttle_key("submit", "*")) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_redis_down_lets_every_submit_through_and_says_so(alice_client, settings, caplog):
    settings.LLM_SUBMIT_THROTTLE_RATE = "1/min"

    with caplog.at_level(logging.WARNING, logger="api.submit_throttles"), redis_down(settings):
        statuses = [post(alice_client).status_code for _ in range(3)]

    assert statuses == [202, 202, 202]
    warnings = [r.getMessage() for r in caplog.records if r.name == "api.submit_throttles"]
    assert len(warnings) == 3
    assert warnings[0].startswith("throttle submit not checked, request let through: Redis")


# One process's attempts at the throttle, as a web worker makes them: the same class, the same
# Redis, its own connection. Each says when it is ready and starts when told, so all run at once.
_ATTEMPTS = """
import json, sys, time, types
import django
django.setup()
from api.submit_throttles import SubmitThrottle
user = types.SimpleNamespace(pk=int(sys.argv[1]), is_authenticated=True)
request = types.SimpleNamespace(method="POST", user=user)
print("ready", flush=True)
sys.stdin.readline()
allowed = 0
for _ in range(int(sys.argv[2])):
    allowed += SubmitThrottle().allow_request(request, None)
    time.sleep(0.002)
print(json.dumps(allowed), flush=True)
"""


@pytest.mark.redis
def test_the_count_is_shared_by_every_process():
    """Four processes, 50 attempts each for one user at 60 a minute: exactly 60 pass, as one
    process alone would allow (DRF's own throttles would let each process pass 60)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "llmops.settings"}
    env["LLM_SUBMIT_THROTTLE_RATE"] = "60/min"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _ATTEMPTS, "424242", "50"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for process in processes:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    allowed = []
    for process in processes:
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0
        allowed.append(json.loads(out))

    assert sum(allowed) == 60, allowed
    assert sum(n > 0 for n in allowed) >= 2, allowed  # they really ran at the same time


@pytest.fixture
def five_a_minute(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The web server subprocess (asgi_server) takes the environment as it is when it starts."""
    monkeypatch.setenv("LLM_SUBMIT_THROTTLE_RATE", "5/min")
    yield


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_the_procfile_web_line_throttles_across_its_worker_processes(five_a_minute, asgi_server):
    token = api_key_for(make_user("carol"))

    async def one() -> httpx.Response:
        # A connection per request, so that the kernel may hand each to any worker process.
        async with httpx.AsyncClient(base_url=asgi_server, timeout=30) as client:
            return await client.post(
                "/api/v1/jobs/", json=job_body(), headers={"Authorization": f"Token {token}"}
            )

    async def burst() -> list[httpx.Response]:
        return list(await asyncio.gather(*(one() for _ in range(12))))

    responses = asyncio.run(burst())

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [202] * 5 + [429] * 7, [r.text for r in responses]
    for refused in (r for r in responses if r.status_code == 429):
        assert refused.json()["code"] == "throttled"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60 + 60 // 5
    assert LlmJob.objects.count() == 5


def test_the_rate_is_read_from_the_environment_and_checked_at_start_up():
    assert settings_in({}, "LLM_SUBMIT_THROTTLE_RATE") == {"LLM_SUBMIT_THROTTLE_RATE": "600/min"}
    assert settings_in({"LLM_SUBMIT_THROTTLE_RATE": "off"}, "LLM_SUBMIT_THROTTLE_RATE") == {
        "LLM_SUBMIT_THROTTLE_RATE": "off"
    }
    error = settings_check_errors({"LLM_SUBMIT_THROTTLE_RATE": "600 per minute"})
    assert "(jobs.E002) LLM_SUBMIT_THROTTLE_RATE: '600 per minute' is not a rate" in error


@pytest.mark.parametrize(
    ("rate", "parsed"),
    [
        ("600/min", (600, 60)),
        ("10/s", (10, 1)),
        ("5/second", (5, 1)),
        ("100/hour", (100, 3600)),
        ("5000/day", (5000, 86400)),
        ("1/m", (1, 60)),
        ("off", None),
        ("None", None),
        (None, None),
    ],
)
def test_rates_are_read_as_drf_spells_them(rate, parsed):
    assert parse_rate(rate) == parsed


@pytest.mark.parametrize("rate", ["", "600", "0/min", "-1/min", "600/fortnight", "x/min", "/min"])
def test_anything_else_is_not_a_rate(rate):
    with pytest.raises(ValueError, match="is not a rate"):
        parse_rate(rate)
