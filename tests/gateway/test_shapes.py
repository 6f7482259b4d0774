"""The front doors' pure parts: the headers, the text a stream gives out across retried
attempts, the OpenAI request as a job body, and the error mapping of a failed job."""

import uuid

import pytest

from api.errors import ValidationFailed
from gateway import openai_requests
from gateway.errors import from_job
from gateway.headers import CallOptions, call_options
from gateway.waiting import JobText
from jobs.models import LlmJob


def test_the_headers_give_the_jobs_options() -> None:
    options = call_options(
        {
            "LLM-Feature": "support",
            "LLM-Tags": "a, b,,c",
            "LLM-Deadline-Seconds": "90",
            "LLM-Priority": "LOW",
            "LLM-Keep-On-Disconnect": "true",
            "Idempotency-Key": "k-1",
        }
    )
    assert options == CallOptions("support", ["a", "b", "c"], 90, "low", True, "k-1")
    assert options.job_fields() == {
        "feature": "support",
        "tags": ["a", "b", "c"],
        "deadline_seconds": 90,
        "priority": "low",
    }
    assert call_options({}) == CallOptions()


@pytest.mark.parametrize(
    "header,value",
    [
        ("LLM-Priority", "urgent"),
        ("LLM-Deadline-Seconds", "soon"),
        ("LLM-Keep-On-Disconnect", "maybe"),
    ],
)
def test_a_bad_header_is_refused_naming_it(header: str, value: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        call_options({header: value})
    assert refused.value.detail == {"field": header}


def test_a_stream_gives_each_character_once_across_lost_and_repeated_deltas() -> None:
    text = JobText()
    assert text.feed(1, 0, "Hello") == "Hello"
    assert text.feed(1, 3, "lo, wor") == ", wor"  # overlaps what was given
    assert text.feed(1, 20, "late") == "" and text.gap  # a lost delta before it: read Redis
    text.gap = False
    assert text.feed(1, 0, "Hello, world") == "ld"
    # A retried attempt starts again at 0: what repeats is not given again.
    assert text.feed(2, 0, "Hello") == ""
    assert text.feed(2, 5, ", world!") == "!"
    assert text.feed(1, 0, "Hello, world and more") == "", "an older attempt is ignored"
    # A retry that says otherwise is held back.
    assert text.feed(3, 0, "Goodbye") == "" and text.diverged
    assert text.given == "Hello, world!"


PNG = "data:image/png;base64,AAAA"


def test_a_chat_request_becomes_a_messages_job_body() -> None:
    body = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Look:"}]},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG}}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
        ],
        "stop": "END",
        "parallel_tool_calls": False,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "user": "someone",
    }
    data = openai_requests.job_data(body, CallOptions(feature="x"), max_output_tokens=1000)
    assert data["system"] == "Be brief." and data["max_tokens"] == 1000
    assert data["stop_sequences"] == ["END"]
    assert data["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert data["tools"] == [{"name": "f", "input_schema": {"type": "object", "properties": {}}}]
    user, assistant, tool = data["messages"]
    assert user["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "AAAA",
    }
    assert assistant["content"] == [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]
    assert tool == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "done"}],
    }
    assert data["mode"] == "realtime" and data["feature"] == "x"


@pytest.mark.parametrize(
    "reason,http_status,status,kind",
    [
        ("overloaded", 529, 529, "overloaded"),
        ("rate_limited", 429, 429, "rate_limit"),
        ("server_error", 503, 503, "api_error"),
        ("authentication_failed", 401, 502, "api_error"),
        ("context_too_long", 400, 400, "invalid_request"),
        ("read_timeout", None, 504, "timeout"),
        ("deadline_exceeded", None, 504, "timeout"),
    ],
)
def test_a_failed_job_answers_its_last_error_class(
    reason: str, http_status: int | None, status: int, kind: str
) -> None:
    job = LlmJob(
        id=uuid.uuid4(),
        status="failed",
        error_code=reason,
        error_http_status=http_status,
        error_message="It failed.",
        attempts=4,
    )
    error = from_job(job)
    assert (error.status, error.kind) == (status, kind)
    assert error.headers == {"x-should-retry": "false"}
    assert "4 attempts" in error.message
