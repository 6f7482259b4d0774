"""The chaos drill's agent tools: every call that starts, every call that ends and every side
effect is appended to a file (``CHAOS_AGENT_LOG``), so that the drill can check, after killed
workers and a flushed Redis, that no tool call recorded as completed ever started again
(chaos/agent_checks.py) and that no side effect came after its call's timeout
(chaos/mix_checks.py).

- ``chaos_effect``: a quick call with a side effect, logged as ``done``;
- ``chaos_hang``: hangs past its timeout (``HANG_TIMEOUT_SECONDS``), then does its side effect
  (``effect``): a call stopped at its timeout never gets there.

Registered in the drill's processes through ``LLM_AGENT_TOOL_MODULES`` (chaos/drill.py); never
installed.
"""

import json
import os
import time
from typing import Any

from agents.tools import agent_tool

__all__ = [
    "CHAOS_AGENT_LOG",
    "HANG_TIMEOUT_SECONDS",
    "HANG_TOOL",
    "TOOL",
    "chaos_effect",
    "counted_run_data",
]

CHAOS_AGENT_LOG = "CHAOS_AGENT_LOG"
TOOL = "chaos_effect"
HANG_TOOL = "chaos_hang"
HANG_TIMEOUT_SECONDS = 2.0
"""Short, so that a reduced drill sees it pass; the hang sleeps longer (its ``seconds``)."""


def _log(what: str, call_id: str) -> None:
    path = os.environ.get(CHAOS_AGENT_LOG)
    if not path:
        return
    # One write of a short line in append mode: lines of several processes never interleave.
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"{what} {call_id} {time.time():.6f}\n")


@agent_tool(
    description="A side effect the chaos drill counts.",
    input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    name=TOOL,
    timeout=10,
)
def chaos_effect(*, call_id: str, n: int = 0) -> str:
    _log("start", call_id)
    time.sleep(0.05)
    _log("done", call_id)
    return f"effect {n}"


@agent_tool(
    description="Hangs past its timeout, then does a side effect the chaos drill looks for.",
    input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
    name=HANG_TOOL,
    timeout=HANG_TIMEOUT_SECONDS,
)
def chaos_hang(*, call_id: str, seconds: float = 2 * HANG_TIMEOUT_SECONDS) -> str:
    _log("start", call_id)
    time.sleep(seconds)
    # The side effect: must never happen for a call stopped at its timeout.
    _log("effect", call_id)
    return "hung, then did its effect"


def counted_run_data(*, feature: str, model: str, index: int) -> dict[str, Any]:
    """An agent run of three turns (the fake provider's ``fake_tool_script``): the first with
    two calls of the counted tool at once, the second with one, then the answer."""
    script = [
        [{"name": TOOL, "input": {"n": 1}}, {"name": TOOL, "input": {"n": 2}}],
        [{"name": TOOL, "input": {"n": 3}}],
        "done",
    ]
    return {
        "feature": feature,
        "model": model,
        "max_tokens": 128,
        "tools": [TOOL],
        "messages": [
            {"role": "user", "content": f"Agent run {index}. fake_tool_script={json.dumps(script)}"}
        ],
    }
