"""A client that hangs up cancels its call's job (the job API's cancel: the stream is closed and
booked with what streamed), unless ``LLM-Keep-On-Disconnect: true``, which lets the job complete,
readable in the job API. The official SDKs against the real stack; the provider's own log says
what it was asked and billed."""

import openai
import pytest

from ledger.models import CostEntry
from tests.gateway.conftest import Stack, billed_for, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "claude-sonnet-4-6"
LONG = [{"role": "user", "content": "Write the report. fake_output_tokens=6000"}]
"""6,000 tokens at 300 a second: a 20-second stream."""


def _in_flight(stack: Stack) -> list[str]:
    return list(stack.fake.http.get("/_fake/in_flight").json()["keys"])


def test_a_streaming_client_that_hangs_up_cancels_its_job(stack: Stack) -> None:
    stack.fake.faults({}, stream_tokens_per_second=300)
    with stack.anthropic().messages.stream(model=MODEL, max_tokens=8000, messages=LONG) as stream:
        job_id = stream.response.headers["LLM-Job-Id"]
        for text in stream.text_stream:
            assert text
            break  # leaving the block closes the connection mid-answer
    wait_for(
        lambda: stack.job(job_id).status == "cancelled",
        timeout=20,
        what=f"cancelled\n{stack.logs()}",
    )
    job = stack.job(job_id)
    assert job.stop_reason == "cancelled" and 0 < len(job.output_text or "") < 6000 * 4
    assert CostEntry.objects.get(job_id=job_id).outcome == "cancelled"
    # The provider's call was closed: it is no longer in flight, billed as its client gone.
    wait_for(lambda: job_id not in _in_flight(stack), timeout=10, what="the call closed")
    assert [call["how"] for call in billed_for(stack.fake, job_id)] == ["client_gone"]


def test_a_waiting_client_that_hangs_up_cancels_its_job(stack: Stack) -> None:
    stack.fake.faults({}, latency_ms=20_000)
    client = stack.openai(timeout=2.0)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model=MODEL, messages=LONG[:1], max_tokens=64)
    job = wait_for(
        lambda: stack.job_or_none("cancelled"), timeout=20, what=f"cancelled\n{stack.logs()}"
    )
    assert job.attempts <= 1


def test_keep_on_disconnect_lets_the_job_complete_in_the_job_api(stack: Stack) -> None:
    stack.fake.faults({}, stream_tokens_per_second=2000)
    ask = [{"role": "user", "content": "Write the report. fake_output_tokens=4000"}]
    with stack.anthropic().messages.stream(
        model=MODEL,
        max_tokens=8000,
        messages=ask,
        extra_headers={"LLM-Keep-On-Disconnect": "true"},
    ) as stream:
        job_id = stream.response.headers["LLM-Job-Id"]
        for _text in stream.text_stream:
            break
    wait_for(
        lambda: stack.job(job_id).status == "completed",
        timeout=30,
        what=f"completed\n{stack.logs()}",
    )
    body = stack.job_api(job_id)
    assert body["status"] == "completed" and body["output"]["stop_reason"] == "end_turn"
    assert len(body["output"]["text"]) > 4000 * 3
    assert [call["how"] for call in billed_for(stack.fake, job_id)] == ["answered"]
