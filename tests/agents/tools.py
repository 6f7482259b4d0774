"""Tools of the agent tests. Each call that runs is counted in Redis (a list per call id), so
that a test sees how many times each call really ran, whatever process ran it."""

import gc
import os
import signal
import subprocess
import time
from typing import Any

import django_rq
from django.db import connection

from agents.tools import ToolError, agent_tool
from tests.db_sessions import session_id

CALLS_KEY = "tests:agent-tool-calls"


def record(name: str, call_id: str) -> None:
    django_rq.get_connection("default").rpush(CALLS_KEY, f"{name}:{call_id}")


def calls() -> list[str]:
    return [c.decode() for c in django_rq.get_connection("default").lrange(CALLS_KEY, 0, -1)]


NUMBERS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


@agent_tool(description="Add two integers.", input_schema=NUMBERS)
def add(*, a: int, b: int, call_id: str) -> dict[str, Any]:
    record("add", call_id)
    return {"sum": a + b}


@agent_tool(
    description="Echo a text.",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
)
def echo(*, call_id: str, text: str = "") -> str:
    record("echo", call_id)
    return text


@agent_tool(description="Always raises.", input_schema={"type": "object"})
def explode(*, call_id: str) -> str:
    record("explode", call_id)
    raise RuntimeError("the tool broke")


@agent_tool(description="Refuses politely.", input_schema={"type": "object"})
def refuse() -> str:
    raise ToolError("not today")


@agent_tool(
    description="Sleeps, then answers (its timeout is 1 s).",
    input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
    timeout=1,
)
def sleepy(*, seconds: float = 3, call_id: str) -> str:
    record("sleepy", call_id)
    time.sleep(seconds)
    return "woke up"


@agent_tool(
    description="A slow side effect (for killing its worker mid-call).",
    input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
    timeout=30,
)
def slow_effect(*, seconds: float = 0, call_id: str) -> str:
    record("slow_effect:start", call_id)
    time.sleep(seconds)
    record("slow_effect", call_id)
    return "done"


@agent_tool(
    description="Needs a human's approval.",
    input_schema={"type": "object", "properties": {"note": {"type": "string"}}},
    requires_approval=True,
)
def guarded(*, note: str = "", call_id: str) -> str:
    record("guarded", call_id)
    return f"guarded ran: {note}"


@agent_tool(
    description="Sleeps past its timeout (1 s), then does its side effect.",
    input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
    timeout=1,
)
def late_effect(*, seconds: float = 2.5, call_id: str) -> str:
    record("late_effect:start", call_id)
    time.sleep(seconds)
    record("late_effect", call_id)  # the side effect: never, once its call was stopped
    return "done, late"


@agent_tool(
    description="Starts a process of its own, then hangs past its timeout (1 s).",
    input_schema={"type": "object"},
    timeout=1,
)
def hang(*, call_id: str) -> str:
    sleeper = subprocess.Popen(["sleep", "60"])
    record(f"hang:{os.getpid()}:{sleeper.pid}", call_id)
    time.sleep(60)
    return "never"


@agent_tool(
    description="Writes and reads the database; says on which connection.",
    input_schema={"type": "object"},
    timeout=10,
)
def database_probe(*, call_id: str) -> dict[str, Any]:
    from agents.models import DemoEmail

    gc.collect()  # as any tool may: whatever it frees must not end the worker's sessions
    DemoEmail.objects.create(call_id=call_id, to="probe@example.com", subject="probe", body="")
    with connection.cursor() as cursor:
        connection_id = session_id(cursor)
    return {"connection_id": connection_id, "emails": DemoEmail.objects.count()}


@agent_tool(
    description="Its process dies: an exit code, or killed.",
    input_schema={"type": "object", "properties": {"how": {"enum": ["exit", "kill"]}}},
    timeout=5,
)
def die(*, how: str = "exit") -> str:
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(3)


@agent_tool(description="Returns what JSON cannot hold.", input_schema={"type": "object"})
def not_json() -> dict[Any, int]:
    return {("a", "tuple"): 1}


@agent_tool(description="Says its process and parent.", input_schema={"type": "object"})
def parentage() -> dict[str, int]:
    return {"pid": os.getpid(), "ppid": os.getppid()}
