"""The Anthropic Messages API at /anthropic, driven with the official ``anthropic`` SDK unchanged
against the real stack (tests/gateway/conftest.py): each call is an ordinary job, visible in the
job API, its cost the fake provider's own bill."""

import json
import time
from decimal import Decimal

import anthropic
import httpx
import pytest

from jobs.models import JobAttempt, LlmJob
from keys.testing import api_key_for
from ledger.models import Budget, CostEntry
from tests.gateway.conftest import Stack, billed_for, billed_usd
from webhooks.models import WebhookSubscription

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "claude-sonnet-4-6"
ASK = [{"role": "user", "content": "Classify: please refund my order"}]


def test_it_answers_a_message_as_an_ordinary_job_with_its_id_and_cost(stack: Stack) -> None:
    client = stack.anthropic()
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=256,
        messages=ASK,
        extra_headers={
            "LLM-Feature": "email-classify",
            "LLM-Tags": "door,sdk",
            "LLM-Deadline-Seconds": "600",
            "LLM-Priority": "high",
            "LLM-Callback-URL": "https://hooks.example.com/llm?token=t0k3n",
        },
    )
    message = raw.parse()
    job_id = raw.headers["LLM-Job-Id"]
    # Its final state is to be POSTed to the callback (webhooks/ delivers it).
    (subscription,) = WebhookSubscription.objects.filter(subject_id=job_id)
    assert subscription.url == "https://hooks.example.com/llm?token=t0k3n"
    body = stack.job_api(job_id)
    assert body["status"] == "completed" and body["attempts"] == 1
    assert body["feature"] == "email-classify" and sorted(body["tags"]) == ["door", "sdk"]
    assert body["deadline"] is not None
    assert message.type == "message" and message.model == MODEL
    assert message.content[0].type == "text"
    assert message.content[0].text == body["output"]["text"]
    assert message.stop_reason == body["output"]["stop_reason"] == "end_turn"
    assert message.usage.input_tokens == body["usage"]["input_tokens"] > 0
    assert message.usage.output_tokens == body["usage"]["output_tokens"] > 0
    # The cost is the ledger's and the provider's own bill of the job's one call.
    cost = Decimal(raw.headers["LLM-Cost-USD"])
    assert cost == Decimal(body["cost_usd"]) == billed_usd(stack.fake, job_id) > 0
    assert len(billed_for(stack.fake, job_id)) == 1
    assert CostEntry.objects.filter(job_id=job_id).count() == 1


def test_a_bad_priority_or_deadline_header_is_a_bad_request(stack: Stack) -> None:
    client = stack.anthropic()
    for header, value in (
        ("LLM-Priority", "urgent"),
        ("LLM-Deadline-Seconds", "soon"),
        ("LLM-Callback-URL", "ftp://hooks.example.com/"),
    ):
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(
                model=MODEL, max_tokens=64, messages=ASK, extra_headers={header: value}
            )
        assert header in refused.value.message
    assert not LlmJob.objects.exists()


def _sse_events(response: object) -> list[tuple[str, dict]]:
    events, name = [], ""
    for line in response.iter_lines():  # type: ignore[attr-defined]
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[6:])))
    return events


def test_it_streams_the_providers_events_in_order_and_the_text_is_the_jobs(stack: Stack) -> None:
    # About 1,200 tokens at 600 a second: the text arrives over two seconds, in many deltas.
    stack.fake.faults({}, stream_tokens_per_second=600)
    ask = [{"role": "user", "content": "Write it. fake_output_tokens=1200"}]
    client = stack.anthropic()
    with client.messages.with_streaming_response.create(
        model=MODEL, max_tokens=2000, messages=ask, stream=True
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        job_id = response.headers["LLM-Job-Id"]
        events = _sse_events(response)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"], names[:5]
    assert names[-2:] == ["message_delta", "message_stop"]
    blocks = [name for name in names if name.startswith("content_block")]
    assert blocks[0] == "content_block_start" and blocks[-1] == "content_block_stop"
    deltas = [data["delta"]["text"] for name, data in events if name == "content_block_delta"]
    assert len(deltas) >= 3, "the text came as the job streamed, not at once"
    job = stack.job(job_id)
    assert job.status == "completed"
    assert "".join(deltas) == job.output_text
    end = dict(events)["message_delta"]
    assert end["delta"]["stop_reason"] == job.stop_reason
    assert end["usage"]["output_tokens"] == job.output_tokens
    assert end["usage"]["input_tokens"] == job.input_tokens
    stop = dict(events)["message_stop"]
    assert stop["llmops"] == {"job_id": job_id, "cost_usd": str(job.cost_usd)}
    assert job.cost_usd == billed_usd(stack.fake, job_id) > 0

    # The SDK's stream helper puts the same message together.
    with client.messages.stream(model=MODEL, max_tokens=2000, messages=ask) as stream:
        final = stream.get_final_message()
        second = stack.job(stream.response.headers["LLM-Job-Id"])
    assert final.content[0].text == second.output_text
    assert final.usage.input_tokens == second.input_tokens
    assert final.usage.output_tokens == second.output_tokens


def _as_kept(block: object) -> dict:
    """A content block as the worker keeps what the provider streamed (providers/anthropic_sdk.py
    ``content_block_dict``)."""
    dumped = block.model_dump(mode="json", exclude_unset=True)  # type: ignore[attr-defined]
    dumped.pop("parsed_output", None)
    return dumped


def test_tool_use_and_thinking_stream_as_the_provider_streams_them(stack: Stack) -> None:
    client = stack.anthropic()
    weather = {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
    with client.messages.stream(
        model=MODEL,
        max_tokens=256,
        messages=[{"role": "user", "content": "What is the weather? Use get_weather."}],
        tools=[weather],
    ) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
        job = stack.job(stream.response.headers["LLM-Job-Id"])
    assert "input_json" in kinds
    assert message.stop_reason == "tool_use"
    call = next(block for block in message.content if block.type == "tool_use")
    assert call.name == "get_weather" and call.input == {"city": "fake"}
    assert [_as_kept(block) for block in message.content] == job.output_content

    with client.messages.stream(
        model=MODEL,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=ASK,
    ) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
        job = stack.job(stream.response.headers["LLM-Job-Id"])
    assert "thinking" in kinds and "signature" in kinds
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == job.output_content[0]["thinking"]
    assert message.content[0].signature == job.output_content[0]["signature"]
    assert message.content[1].text == job.output_text


def test_a_429_storm_is_retried_inside_and_the_client_sees_one_answer(stack: Stack) -> None:
    stack.fake.http.post("/_fake/faults", json={"next": ["429", "429", "ok"]}).raise_for_status()
    raw = stack.anthropic().messages.with_raw_response.create(
        model=MODEL, max_tokens=128, messages=ASK
    )
    message = raw.parse()
    job = stack.job(raw.headers["LLM-Job-Id"])
    assert job.status == "completed" and job.attempts == 3
    assert message.content[0].text == job.output_text
    outcomes = list(CostEntry.objects.filter(job=job).values_list("outcome", flat=True))
    assert len(outcomes) == 3
    # Only the answered call was billed, and that is what the job cost.
    assert len(billed_for(stack.fake, str(job.id))) == 1
    assert Decimal(raw.headers["LLM-Cost-USD"]) == billed_usd(stack.fake, str(job.id))


def test_refusals_are_the_sdks_own_error_classes(stack: Stack) -> None:
    with pytest.raises(anthropic.AuthenticationError) as refused:
        stack.anthropic(api_key="not-a-key").messages.create(
            model=MODEL, max_tokens=64, messages=ASK
        )
    assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]

    reader = api_key_for(stack.user, scopes=["jobs:read"], name="reader")
    with pytest.raises(anthropic.PermissionDeniedError) as refused_scope:
        stack.anthropic(api_key=reader).messages.create(model=MODEL, max_tokens=64, messages=ASK)
    assert "jobs:write" in refused_scope.value.message
    assert [m.id for m in stack.anthropic(api_key=reader).models.list()]  # reads are allowed

    with pytest.raises(anthropic.NotFoundError) as unknown:
        stack.anthropic().messages.create(model="claude-sonet-4-6", max_tokens=64, messages=ASK)
    assert unknown.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert "Did you mean 'claude-sonnet-4-6'?" in unknown.value.message

    with pytest.raises(anthropic.BadRequestError) as bad:
        stack.anthropic().messages.create(model=MODEL, max_tokens=0, messages=ASK)
    assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert not LlmJob.objects.exists()


def test_a_spent_budget_is_a_rate_limit_with_retry_after(stack: Stack) -> None:
    client = stack.anthropic()
    headers = {"LLM-Feature": "tight"}
    first = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=64, messages=ASK, extra_headers=headers
    )
    spent = Decimal(first.headers["LLM-Cost-USD"])
    half = (spent / 2).quantize(Decimal("0.000001"))
    Budget.objects.create(scope=Budget.Scope.FEATURE, feature="tight", period="day", limit_usd=half)
    with pytest.raises(anthropic.RateLimitError) as refused:
        client.messages.create(model=MODEL, max_tokens=64, messages=ASK, extra_headers=headers)
    assert refused.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert int(refused.value.response.headers["retry-after"]) > 0
    assert LlmJob.objects.count() == 1


def test_a_job_that_fails_after_its_retries_answers_the_providers_last_error(stack: Stack) -> None:
    stack.fake.faults({"529": 1.0})
    with pytest.raises(anthropic.InternalServerError) as failed:
        stack.anthropic().messages.create(model=MODEL, max_tokens=64, messages=ASK)
    response = failed.value.response
    assert response.status_code == 529
    assert failed.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert response.headers["x-should-retry"] == "false"
    job = stack.job(response.headers["LLM-Job-Id"])
    assert job.status == "failed" and job.error_code == "overloaded" and job.attempts == 4
    assert billed_for(stack.fake, str(job.id)) == []  # error answers bill nothing


def test_one_idempotency_key_makes_one_job_also_through_the_sdks_own_retry(stack: Stack) -> None:
    client = stack.anthropic()
    key = {"Idempotency-Key": "door-retry-1"}
    first = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=64, messages=ASK, extra_headers=key
    )
    again = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=64, messages=ASK, extra_headers=key
    )
    assert first.headers["LLM-Job-Id"] == again.headers["LLM-Job-Id"]
    assert first.parse().content[0].text == again.parse().content[0].text
    assert LlmJob.objects.count() == 1

    # The SDK times out on a slow call and retries it with the same headers: the retry waits
    # for the same job (kept running by LLM-Keep-On-Disconnect), which the provider runs once.
    stack.fake.faults({}, latency_ms=2500)
    slow = stack.anthropic(max_retries=4, timeout=1.0)
    message = slow.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "Slowly, please."}],
        extra_headers={"Idempotency-Key": "door-retry-2", "LLM-Keep-On-Disconnect": "true"},
    )
    job = LlmJob.objects.get(idempotency_key="door-retry-2")
    assert message.content[0].text == job.output_text
    assert LlmJob.objects.count() == 2
    assert len(billed_for(stack.fake, str(job.id))) == 1


def test_count_tokens_and_models(stack: Stack, local_openai: str) -> None:
    client = stack.anthropic()
    counted = client.messages.count_tokens(model=MODEL, messages=ASK, system="Be brief.")
    assert counted.input_tokens > 0
    with pytest.raises(anthropic.BadRequestError) as no_count:
        client.messages.count_tokens(model="gpt-4o-mini", messages=ASK)
    assert "no token count" in no_count.value.message
    assert not LlmJob.objects.exists()

    models = client.models.list(limit=1000)
    ids = [model.id for model in models.data]
    assert MODEL in ids and "gpt-4o-mini" in ids
    assert "text-embedding-3-small" not in ids, "the Messages API has no embedding models"
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("claude-none")


def test_an_openai_compatible_model_answers_at_the_anthropic_door(
    stack: Stack, local_openai: str
) -> None:
    raw = stack.anthropic().messages.with_raw_response.create(
        model="gpt-4o-mini", max_tokens=128, messages=ASK, system="Be brief."
    )
    message = raw.parse()
    job = stack.job(raw.headers["LLM-Job-Id"])
    assert job.status == "completed" and message.model == "gpt-4o-mini"
    assert message.content[0].text == job.output_text
    assert job.cost_usd == billed_usd(stack.fake, str(job.id)) > 0


def test_a_base_url_with_a_slash_works_and_a_wrong_one_says_where_the_api_is(
    stack: Stack,
) -> None:
    slashed = anthropic.Anthropic(base_url=f"{stack.url}/anthropic/", api_key=stack.secret)
    assert slashed.messages.create(model=MODEL, max_tokens=32, messages=ASK).content
    response = httpx.post(
        f"{stack.url}/anthropic/v1/messages/",
        json={"model": MODEL, "max_tokens": 32, "messages": ASK},
        headers={"x-api-key": stack.secret},
        timeout=30,
    )
    assert response.status_code == 200 and response.json()["type"] == "message"

    wrong = anthropic.Anthropic(base_url=f"{stack.url}/anthropic/v1", api_key=stack.secret)
    with pytest.raises(anthropic.NotFoundError) as missing:
        wrong.messages.create(model=MODEL, max_tokens=32, messages=ASK)
    assert 'base_url="http://<host>/anthropic"' in missing.value.message
    assert LlmJob.objects.count() == 2


def test_a_stream_retried_after_its_text_began_sends_each_character_once(stack: Stack) -> None:
    # The first attempt breaks half-way (an overloaded error inside the stream); the retry
    # answers the same text, of which the client gets only what it did not have.
    stack.fake.faults({}, stream_tokens_per_second=600)
    stack.fake.http.post(
        "/_fake/faults", json={"next": ["overloaded_midstream", "ok"]}
    ).raise_for_status()
    ask = [{"role": "user", "content": "Write it. fake_output_tokens=1200"}]
    arrivals = []
    with stack.anthropic().messages.stream(model=MODEL, max_tokens=2000, messages=ask) as stream:
        pieces = []
        for piece in stream.text_stream:
            arrivals.append(time.time())
            pieces.append(piece)
        message = stream.get_final_message()
        job = stack.job(stream.response.headers["LLM-Job-Id"])
    assert job.status == "completed" and job.attempts == 2
    assert CostEntry.objects.get(job=job, attempt=1).outcome != "success"
    retried_at = JobAttempt.objects.get(job=job, attempt=2).claimed_at.timestamp()
    assert arrivals[0] < retried_at, "the client had text from the first attempt"
    assert len(pieces) >= 3
    assert "".join(pieces) == job.output_text == message.content[0].text
