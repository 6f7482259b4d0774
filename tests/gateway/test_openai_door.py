"""The OpenAI Chat Completions, Embeddings and Models APIs at /openai/v1, driven with the
official ``openai`` SDK unchanged against the real stack: a Claude model and an
OpenAI-compatible one answer alike, each call an ordinary job whose cost is the fake provider's
own bill."""

import json
from decimal import Decimal

import openai
import pytest

from jobs.models import LlmJob
from ledger.models import Budget
from tests.gateway.conftest import Stack, billed_for, billed_usd

pytestmark = pytest.mark.django_db(transaction=True)

ASK = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Classify: please refund my order"},
]


@pytest.mark.parametrize("model", ["claude-sonnet-4-6", "gpt-4o-mini"])
def test_a_chat_completion_of_either_provider_is_an_ordinary_job(
    stack: Stack, local_openai: str, model: str
) -> None:
    raw = stack.openai().chat.completions.with_raw_response.create(
        model=model, messages=ASK, max_tokens=128, extra_headers={"LLM-Feature": "support"}
    )
    completion = raw.parse()
    job_id = raw.headers["LLM-Job-Id"]
    job = stack.job(job_id)
    body = stack.job_api(job_id)
    assert body["status"] == "completed" and body["feature"] == "support"
    assert job.system == "Be brief."
    assert completion.object == "chat.completion" and completion.model == model
    choice = completion.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "stop"
    assert choice.message.content == job.output_text
    assert completion.usage is not None
    assert completion.usage.completion_tokens == job.output_tokens
    assert completion.usage.prompt_tokens >= (job.input_tokens or 0) > 0
    cost = Decimal(raw.headers["LLM-Cost-USD"])
    assert cost == Decimal(body["cost_usd"]) == billed_usd(stack.fake, job_id) > 0


def test_chunks_stream_as_the_job_streams_with_usage_and_done(stack: Stack) -> None:
    stack.fake.faults({}, stream_tokens_per_second=600)
    stream = stack.openai().chat.completions.create(
        model="claude-sonnet-4-6",
        messages=[{"role": "user", "content": "Write it. fake_output_tokens=1200"}],
        max_tokens=2000,
        stream=True,
        stream_options={"include_usage": True},
    )
    job_id = stream.response.headers["LLM-Job-Id"]
    chunks = list(stream)  # the SDK stops at data: [DONE]
    assert chunks[0].choices[0].delta.role == "assistant"
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    pieces = [delta.content for delta in deltas if delta.content]
    assert len(pieces) >= 3, "the text came as the job streamed"
    finished = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finished[-1] == "stop" and set(finished[:-1]) == {None}
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    job = stack.job(job_id)
    assert "".join(pieces) == job.output_text
    assert usage_chunk.usage.completion_tokens == job.output_tokens
    assert usage_chunk.model_extra == {"llmops": {"job_id": job_id, "cost_usd": str(job.cost_usd)}}
    assert job.cost_usd == billed_usd(stack.fake, job_id) > 0


def test_tools_come_back_as_tool_calls(stack: Stack) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    client = stack.openai()
    completion = client.chat.completions.create(
        model="claude-sonnet-4-6",
        messages=[{"role": "user", "content": "The weather in Paris?"}],
        tools=tools,
        tool_choice="required",
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "fake"}
    job = LlmJob.objects.get()
    assert job.params["tool_choice"] == {"type": "any"}
    assert job.params["tools"][0]["input_schema"] == tools[0]["function"]["parameters"]

    # The tool's result goes back as the API has it: a tool message after the assistant's call.
    answer = client.chat.completions.create(
        model="claude-sonnet-4-6",
        messages=[
            {"role": "user", "content": "The weather in Paris?"},
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"},
        ],
        tools=tools,
    )
    assert "Sunny, 21 C" in (answer.choices[0].message.content or "")
    turn = LlmJob.objects.order_by("-created_at").first()
    assert turn is not None and turn.messages[-1]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": call.id,
        "content": "Sunny, 21 C",
    }


def test_embeddings_as_floats_and_base64(stack: Stack, local_openai: str) -> None:
    client = stack.openai()
    texts = ["Refund policy", "Shipping times"]
    raw = client.embeddings.with_raw_response.create(
        model="text-embedding-3-small", input=texts, encoding_format="float"
    )
    floats = raw.parse()
    job_id = raw.headers["LLM-Job-Id"]
    body = stack.job_api(job_id)
    assert body["kind"] == "embedding" and body["status"] == "completed"
    assert [row.index for row in floats.data] == [0, 1]
    assert [row.embedding for row in floats.data] == body["output"]["embeddings"]
    assert floats.usage.prompt_tokens == body["usage"]["input_tokens"] > 0
    assert Decimal(raw.headers["LLM-Cost-USD"]) == billed_usd(stack.fake, job_id)

    # The SDK asks for base64 by default and decodes it: the same vectors.
    decoded = client.embeddings.create(model="text-embedding-3-small", input=texts)
    assert [list(row.embedding) for row in decoded.data] == body["output"]["embeddings"]


def test_refusals_are_the_sdks_own_error_classes(stack: Stack) -> None:
    with pytest.raises(openai.AuthenticationError) as refused:
        stack.openai(api_key="not-a-key").chat.completions.create(
            model="claude-sonnet-4-6", messages=ASK
        )
    assert refused.value.code == "invalid_api_key"

    with pytest.raises(openai.NotFoundError) as unknown:
        stack.openai().chat.completions.create(model="claude-sonet-4-6", messages=ASK)
    assert unknown.value.code == "model_not_found"
    assert "Did you mean 'claude-sonnet-4-6'?" in unknown.value.message

    with pytest.raises(openai.BadRequestError) as bad:
        stack.openai().chat.completions.create(model="claude-sonnet-4-6", messages=ASK, n=2)
    assert bad.value.param == "n"

    with pytest.raises(openai.BadRequestError) as hot:
        stack.openai().chat.completions.create(
            model="claude-sonnet-4-6", messages=ASK, temperature=1.5
        )
    assert hot.value.param == "temperature"
    assert not LlmJob.objects.exists()


def test_a_spent_budget_and_a_failed_job_answer_their_classes(stack: Stack) -> None:
    client = stack.openai()
    headers = {"LLM-Feature": "tight"}
    first = client.chat.completions.with_raw_response.create(
        model="claude-sonnet-4-6", messages=ASK, max_tokens=64, extra_headers=headers
    )
    spent = Decimal(first.headers["LLM-Cost-USD"])
    half = (spent / 2).quantize(Decimal("0.000001"))
    Budget.objects.create(scope=Budget.Scope.FEATURE, feature="tight", period="day", limit_usd=half)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(
            model="claude-sonnet-4-6", messages=ASK, max_tokens=64, extra_headers=headers
        )
    assert int(refused.value.response.headers["retry-after"]) > 0
    assert refused.value.code == "budget_exceeded"

    stack.fake.faults({"500": 1.0})
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="claude-sonnet-4-6", messages=ASK, max_tokens=64)
    assert failed.value.response.status_code == 500
    job = stack.job(failed.value.response.headers["LLM-Job-Id"])
    assert job.status == "failed" and job.error_code == "server_error" and job.attempts == 4
    assert billed_for(stack.fake, str(job.id)) == []


def test_models_list_every_model_a_call_may_name(stack: Stack, local_openai: str) -> None:
    client = stack.openai()
    ids = [model.id for model in client.models.list()]
    assert {"claude-sonnet-4-6", "gpt-4o-mini", "text-embedding-3-small"} <= set(ids)
    model = client.models.retrieve("gpt-4o-mini")
    assert model.id == "gpt-4o-mini" and model.owned_by == "local-openai"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-none")
