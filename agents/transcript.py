"""A run's transcript, built from what is stored once: the run's first messages plus what each
step added (a model turn: its assistant content; a tool call: its ``tool_result``).

Each turn's prompt carries two prompt-cache breakpoints (``cache_control``): one at the end of
the previous turn's prompt, whose prefix that turn wrote to the cache (a read now), and one at
the end of this prompt (written for the next turn). So from the third turn on, every token but
the last turn's additions is a cache read.
"""

import copy
from collections.abc import Sequence
from typing import Any

from agents.models import AgentRun, AgentStep
from jobs.message_refs import make_ref

__all__ = [
    "CACHE_BREAKPOINT",
    "TURN_REF",
    "tool_result_block",
    "transcript",
    "turn_messages",
    "turn_messages_ref",
    "turn_messages_resolve",
]

TURN_REF = "agent_turn"
"""The kind of a turn job's ``messages_ref`` (jobs/message_refs.py): the job stores its run and
the index of its model step, not the transcript, which the run's earlier steps rebuild."""

CACHE_BREAKPOINT = {"type": "ephemeral"}
EMPTY_RESULT = "(no output)"
"""A tool_result's text when the tool returned nothing: the API refuses an empty text block."""


def tool_result_block(step: AgentStep) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": step.call_id,
        "content": str(step.output or "") or EMPTY_RESULT,
    }
    if step.is_error:
        block["is_error"] = True
    return block


def transcript(
    *, messages: list[dict[str, Any]], steps: Sequence[AgentStep]
) -> list[dict[str, Any]]:
    """The first messages, then per turn the assistant's content and, if it called tools, one
    user message with every result in the model's order. Steps not completed add nothing."""
    result = list(messages)
    by_turn: dict[int, list[AgentStep]] = {}
    for step in sorted(steps, key=lambda s: s.index):
        by_turn.setdefault(step.turn, []).append(step)
    for turn in sorted(by_turn):
        model = [s for s in by_turn[turn] if s.kind == AgentStep.Kind.MODEL]
        if not model or model[0].status != AgentStep.Status.COMPLETED:
            continue
        result.append({"role": "assistant", "content": model[0].output})
        results = [
            tool_result_block(s)
            for s in by_turn[turn]
            if s.kind == AgentStep.Kind.TOOL and s.status == AgentStep.Status.COMPLETED
        ]
        if results:
            result.append({"role": "user", "content": results})
    return result


def _as_blocks(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": [{"type": "text", "text": content}]}
    return message


def _mark_last_block(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content}]
    else:
        blocks = copy.deepcopy(content) if isinstance(content, list) else []
    if not blocks or not isinstance(blocks[-1], dict):
        return message
    if blocks[-1].get("type") in ("thinking", "redacted_thinking"):
        return message  # the API takes no cache_control on a thinking block
    blocks[-1]["cache_control"] = dict(CACHE_BREAKPOINT)
    return {**message, "content": blocks}


def turn_messages(
    *, messages: list[dict[str, Any]], steps: Sequence[AgentStep]
) -> list[dict[str, Any]]:
    """The next turn's messages: the transcript with its two cache breakpoints."""
    # Text blocks, not strings: every turn then sends the same prefix, byte for byte, with or
    # without a breakpoint on a message (the cache matches exact prefixes).
    full = [_as_blocks(m) for m in transcript(messages=messages, steps=steps)]
    previous_end = len(full) - 3  # the previous prompt ended before its answer and results
    marked = list(full)
    if previous_end >= len(messages) - 1 and previous_end >= 0:
        marked[previous_end] = _mark_last_block(marked[previous_end])
    marked[-1] = _mark_last_block(marked[-1])
    return marked


def turn_messages_ref(
    *, run: AgentRun, before_step: int, messages: list[dict[str, Any]]
) -> dict[str, Any]:
    """The reference a turn's job stores: these ``messages`` are ``turn_messages`` of the run's
    first messages and its steps before ``before_step`` (all completed, and never changed)."""
    return make_ref(TURN_REF, messages, run=str(run.id), before_step=before_step)


def turn_messages_resolve(ref: dict[str, Any]) -> list[dict[str, Any]]:
    """Two queries: the run's first messages, and its steps before the turn."""
    run = AgentRun.objects.only("messages").get(id=ref["run"])
    steps = AgentStep.objects.filter(run_id=ref["run"], index__lt=ref["before_step"])
    return turn_messages(messages=run.messages, steps=list(steps.order_by("index")))
