"""The fake provider's scripted agents (``fake_tool_script=``), its answers to tool results and
its prompt cache with several breakpoints, through the real anthropic SDK (no database)."""

import json
from typing import Any

import anthropic
import pytest

from tests.fake_provider.test_fake_provider import MODEL, sdk, server_url, url  # noqa: F401

SCRIPT = [
    [{"name": "add", "input": {"a": 1, "b": 2}}, {"name": "echo", "input": {"text": "hi"}}],
    "The sum is 3.",
]
TOOLS = [
    {"name": "add", "description": "Add.", "input_schema": {"type": "object"}},
    {"name": "echo", "description": "Echo.", "input_schema": {"type": "object"}},
]


def first() -> dict[str, Any]:
    return {"role": "user", "content": "Help. fake_tool_script=" + json.dumps(SCRIPT)}


def test_a_script_answers_each_turn_with_its_parallel_calls_then_its_final_text(
    url: str,  # noqa: F811
) -> None:
    client = sdk(url)
    turn1 = client.messages.create(model=MODEL, max_tokens=256, tools=TOOLS, messages=[first()])
    assert turn1.stop_reason == "tool_use"
    calls = [b for b in turn1.content if b.type == "tool_use"]
    assert [(c.name, c.input) for c in calls] == [
        ("add", {"a": 1, "b": 2}),
        ("echo", {"text": "hi"}),
    ]
    assert len({c.id for c in calls}) == 2
    # The same request (a retried turn) gets the same calls, ids included.
    again = client.messages.create(model=MODEL, max_tokens=256, tools=TOOLS, messages=[first()])
    assert [b.id for b in again.content if b.type == "tool_use"] == [c.id for c in calls]

    results = [
        {"type": "tool_result", "tool_use_id": calls[0].id, "content": '{"sum": 3}'},
        {"type": "tool_result", "tool_use_id": calls[1].id, "content": "hi", "is_error": True},
    ]
    messages: Any = [
        first(),
        {"role": "assistant", "content": [b.model_dump() for b in turn1.content]},
        {"role": "user", "content": results},
    ]
    turn2 = client.messages.create(model=MODEL, max_tokens=256, tools=TOOLS, messages=messages)
    assert turn2.stop_reason == "end_turn"
    assert [b.text for b in turn2.content if b.type == "text"] == ["The sum is 3."]
    # Past the script, a turn of results is answered from the results themselves.
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in turn2.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "7"}]},
    ]
    turn3 = client.messages.create(model=MODEL, max_tokens=256, tools=TOOLS, messages=messages)
    assert turn3.content[0].text == "Results: 7" and turn3.stop_reason == "end_turn"


def test_a_script_that_is_not_a_list_of_turns_is_a_400(url: str) -> None:  # noqa: F811
    bad = [{"role": "user", "content": 'fake_tool_script=[{"name": 1}]'}]
    with pytest.raises(anthropic.BadRequestError, match="fake_tool_script"):
        sdk(url).messages.create(model=MODEL, max_tokens=64, messages=bad)


def test_the_longest_cached_prefix_at_any_breakpoint_is_read(url: str) -> None:  # noqa: F811
    client = sdk(url)
    mark = {"type": "ephemeral"}
    one = {"type": "text", "text": "a" * 400}  # 100 tokens
    two = {"type": "text", "text": "b" * 400}
    three = {"type": "text", "text": "c" * 400}

    def usage(*blocks: Any) -> Any:
        return client.messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": list(blocks)}]
        ).usage

    first_turn = usage({**one, "cache_control": mark})
    assert first_turn.cache_creation_input_tokens == 100 and first_turn.cache_read_input_tokens == 0
    # The next turn marks the previous end (cached) and its own end (written).
    second = usage({**one, "cache_control": mark}, {**two, "cache_control": mark})
    assert second.cache_read_input_tokens == 100 and second.cache_creation_input_tokens == 100
    third = usage(one, {**two, "cache_control": mark}, {**three, "cache_control": mark})
    assert third.cache_read_input_tokens == 200 and third.cache_creation_input_tokens == 100
