"""The job body as a Chat Completions request, and the answer back (pure)."""

import pytest

from providers.openai_translate import Untranslatable, chat_request, output_content


def test_it_translates_system_parts_tools_and_tool_turns():
    request = chat_request(
        {
            "model": "m",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "Be brief."}],
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 5,
            "stop_sequences": ["END"],
            "tools": [{"name": "t", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": "AAA"}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "x", "signature": "s"},
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "c1", "name": "t", "input": {"a": 1}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "42"},
                    {"type": "text", "text": "and?"},
                ]},
            ],
        }
    )  # fmt: skip
    assert request["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
        ]},
        {"role": "assistant", "content": "calling", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "t", "arguments": '{"a": 1}'}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "user", "content": "and?"},
    ]  # fmt: skip
    assert request["tools"] == [
        {"type": "function", "function": {"name": "t", "parameters": {"type": "object"},
                                          "description": "d"}}
    ]  # fmt: skip
    assert request["tool_choice"] == "required" and request["parallel_tool_calls"] is False
    assert request["stop"] == ["END"] and request["max_tokens"] == 100
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}
    assert request["temperature"] == 0.2 and request["top_p"] == 0.9
    assert request["extra_body"] == {"top_k": 5}


@pytest.mark.parametrize(
    "extra",
    [
        {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
    ],
)
def test_what_has_no_chat_completions_form_is_refused(extra):
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(Untranslatable):
        chat_request({**body, **extra})


def test_tool_calls_come_back_as_tool_use_blocks():
    assert output_content("hi", [{"id": "c", "name": "t", "arguments": '{"a": 1}'},
                                 {"id": "d", "name": "u", "arguments": "not json"}]) == [
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "c", "name": "t", "input": {"a": 1}},
        {"type": "tool_use", "id": "d", "name": "u", "input": {"_raw": "not json"}},
    ]  # fmt: skip
