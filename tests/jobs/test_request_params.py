# ruff: noqa: E501  (the table of bad values reads best one case a line)
"""A job's Messages API parameters beyond the prompt (tools, tool_choice, stop_sequences, top_p,
top_k, thinking): each bad value answers 400 with its code and field and writes nothing; good
ones reach the fake provider unchanged through real workers, and the answer's content blocks
(a tool call, a thinking block) come back in ``output.content``; tools count in the cost bound."""

from decimal import Decimal
from typing import Any

import pytest

from jobs.models import LlmJob
from ledger.models import CostEntry
from ledger.pricing import attempt_cost
from ledger.services import job_upper_bound_cost
from tests.conftest import job_body, submit

LOOKUP = {
    "name": "lookup_order",
    "description": "Look up an order by its number.",
    "input_schema": {
        "type": "object",
        "properties": {"number": {"type": "integer"}},
        "required": ["number"],
    },
}
THINKING = {"type": "enabled", "budget_tokens": 1024}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "overrides,code,field",
    [
        ({"tools": []}, "invalid_tools", "tools"),
        ({"tools": {"name": "x"}}, "invalid_tools", "tools"),
        ({"tools": ["lookup"]}, "invalid_tools", "tools[0]"),
        ({"tools": [{**LOOKUP, "name": "has space"}]}, "invalid_tools", "tools[0].name"),
        ({"tools": [LOOKUP, LOOKUP]}, "invalid_tools", "tools[1].name"),
        ({"tools": [{**LOOKUP, "input_schema": {"type": "string"}}]}, "invalid_tools", "tools[0].input_schema"),
        ({"tools": [{**LOOKUP, "strict_mode": 1}]}, "invalid_tools", "tools[0]"),
        ({"tool_choice": {"type": "auto"}}, "invalid_tool_choice", "tool_choice"),
        ({"tools": [LOOKUP], "tool_choice": {"type": "sometimes"}}, "invalid_tool_choice", "tool_choice"),
        ({"tools": [LOOKUP], "tool_choice": {"type": "tool", "name": "other"}}, "invalid_tool_choice", "tool_choice.name"),
        ({"tools": [LOOKUP], "tool_choice": "auto"}, "invalid_tool_choice", "tool_choice"),
        ({"stop_sequences": "END"}, "invalid_stop_sequences", "stop_sequences"),
        ({"stop_sequences": ["  "]}, "invalid_stop_sequences", "stop_sequences"),
        ({"stop_sequences": ["x"] * 17}, "invalid_stop_sequences", "stop_sequences"),
        ({"top_p": 1.5}, "invalid_top_p", "top_p"),
        ({"top_p": True}, "invalid_top_p", "top_p"),
        ({"top_k": 0}, "invalid_top_k", "top_k"),
        ({"top_k": 2.5}, "invalid_top_k", "top_k"),
        ({"thinking": {"type": "enabled"}}, "invalid_thinking", "thinking"),
        ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "invalid_thinking", "thinking.budget_tokens"),
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 2048}, "invalid_thinking", "thinking.budget_tokens"),
        ({"thinking": THINKING, "max_tokens": 4096, "temperature": 0.2}, "invalid_thinking", "temperature"),
        ({"thinking": THINKING, "max_tokens": 4096, "top_k": 5}, "invalid_thinking", "top_k"),
        ({"thinking": THINKING, "max_tokens": 4096, "tools": [LOOKUP], "tool_choice": {"type": "any"}}, "invalid_thinking", "tool_choice"),
    ],
)  # fmt: skip
def test_each_bad_value_has_its_code_and_field_and_writes_nothing(
    alice_client: Any, prices: None, overrides: dict[str, Any], code: str, field: str
) -> None:
    response = alice_client.post("/api/v1/jobs/", job_body(**overrides), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code
    assert response.json()["detail"]["field"] == field
    assert LlmJob.objects.count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_tool_call_comes_back_as_a_tool_use_block(alice_client, workers, fake_provider):
    job = submit(
        alice_client,
        messages=[{"role": "user", "content": "Where is order 7?"}],
        tools=[LOOKUP],
        tool_choice={"type": "tool", "name": "lookup_order"},
    )
    assert job.provider_request()["tools"] == [LOOKUP]
    workers.drain()
    shown = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
    assert shown["status"] == "completed", shown
    output = shown["output"]
    assert output["stop_reason"] == "tool_use"
    call = output["content"][-1]
    assert call["type"] == "tool_use" and call["name"] == "lookup_order"
    assert call["input"] == {"number": 7} and call["id"].startswith("toolu_")
    assert output["text"] == "I will call lookup_order."


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_web_search_is_passed_through_and_billed_at_its_price(
    alice_client, workers, fake_provider
):
    """A server tool runs at the provider: its blocks come back in ``output.content`` and each
    search is booked at the price's fee ($10 per 1,000), so the ledger equals the bill."""
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    job = submit(
        alice_client,
        messages=[{"role": "user", "content": "Search the web for the refund policy."}],
        tools=[search],
    )
    workers.drain()
    shown = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
    assert shown["status"] == "completed", shown
    kinds = [block["type"] for block in shown["output"]["content"]]
    assert kinds == ["server_tool_use", "web_search_tool_result", "text"]
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.web_search_requests == 1
    (call,) = fake_provider.http.get("/_fake/billing").json()["calls"]
    assert entry.cost_usd == Decimal(call["cost_usd"])
    tokens_only = attempt_cost(entry.price, {"input_tokens": entry.input_tokens,
                                             "output_tokens": entry.output_tokens})  # fmt: skip
    assert entry.cost_usd - tokens_only == Decimal("0.01")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_thinking_and_stop_sequences_reach_the_provider(alice_client, workers, fake_provider):
    thinking = submit(alice_client, max_tokens=4096, thinking=THINKING)
    stopped = submit(alice_client, stop_sequences=["to:"], top_p=0.9, top_k=40)
    workers.drain()
    thought = alice_client.get(f"/api/v1/jobs/{thinking.id}/").json()["output"]
    assert [block["type"] for block in thought["content"]] == ["thinking", "text"]
    assert thought["content"][0]["signature"].startswith("fake-")
    assert thought["text"] == thought["content"][1]["text"]
    cut = alice_client.get(f"/api/v1/jobs/{stopped.id}/").json()["output"]
    assert cut["stop_reason"] == "stop_sequence" and cut["text"] == "Fake reply "


@pytest.mark.django_db
def test_tools_count_in_the_attempts_cost_bound(alice_client, prices):
    plain = submit(alice_client)
    with_tools = submit(alice_client, tools=[LOOKUP])
    assert job_upper_bound_cost(job=with_tools) > job_upper_bound_cost(job=plain)


@pytest.mark.django_db
def test_a_job_without_parameters_keeps_its_fingerprint(alice_client, prices):
    """Idempotency keys stored before the parameters existed still match the same body."""
    from jobs.validation import validate_job_request

    request = validate_job_request(job_body())
    assert request.params is None
    assert "params" not in request.fingerprint() and len(request.fingerprint()) == 64
    again = alice_client.post(
        "/api/v1/jobs/", job_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    same = alice_client.post("/api/v1/jobs/", job_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert again.json()["id"] == same.json()["id"]
