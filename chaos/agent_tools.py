"""The chaos drill's agent tool: every call that starts and every call that ends is appended to
a file (``CHAOS_AGENT_LOG``), so that the drill can check, after killed workers and a flushed
Redis, that no tool call recorded as completed ever started again (chaos/agent_checks.py).

Registered in the drill's processes through ``LLM_AGENT_TOOL_MODULES`` (chaos/drill.py); never
installed.
"""

import os
import time

from agents.tools import agent_tool

__all__ = ["CHAOS_AGENT_LOG", "TOOL", "chaos_effect"]

CHAOS_AGENT_LOG = "CHAOS_AGENT_LOG"
TOOL = "chaos_effect"


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
