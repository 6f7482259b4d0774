"""Demo tools for ``make run``, the live page and the README: no network, no real mail.
Registered by the default ``LLM_AGENT_TOOL_MODULES``; set it without this module in production.
"""

import ast
import operator
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agents.models import DemoEmail
from agents.tools import ToolError, agent_tool

_OPERATORS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
MAX_EXPRESSION = 200


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        if isinstance(node.value, bool):
            raise ToolError("only numbers are allowed")
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ToolError("exponent too large")
        return _OPERATORS[type(node.op)](left, right)  # type: ignore[no-any-return]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))  # type: ignore[no-any-return]
    raise ToolError("only numbers and + - * / // % ** ( ) are allowed")


@agent_tool(
    description="Evaluate an arithmetic expression (numbers, + - * / // % ** and parentheses).",
    input_schema={
        "type": "object",
        "properties": {"expression": {"type": "string", "maxLength": MAX_EXPRESSION}},
        "required": ["expression"],
        "additionalProperties": False,
    },
    timeout=5,
)
def calculator(*, expression: str) -> str:
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not an expression: {exc.msg}") from exc
    try:
        value = _evaluate(tree)
    except ZeroDivisionError as exc:
        raise ToolError("division by zero") from exc
    return str(value)


@agent_tool(
    description="The current date and time in a time zone (an IANA name such as Europe/Paris).",
    input_schema={
        "type": "object",
        "properties": {"timezone": {"type": "string", "maxLength": 64}},
        "required": ["timezone"],
        "additionalProperties": False,
    },
    timeout=5,
)
def clock(*, timezone: str) -> dict[str, str]:
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ToolError(f"unknown time zone: {timezone}") from exc
    now = datetime.now(UTC).astimezone(zone)
    return {"timezone": timezone, "iso": now.isoformat(), "weekday": now.strftime("%A")}


@agent_tool(
    description="Send an email (demo: the message is only recorded, never mailed).",
    input_schema={
        "type": "object",
        "properties": {
            "to": {"type": "string", "maxLength": 254},
            "subject": {"type": "string", "maxLength": 200},
            "body": {"type": "string", "maxLength": 10000},
        },
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    },
    requires_approval=True,
    timeout=10,
)
def send_email(*, to: str, subject: str, body: str, call_id: str) -> str:
    # The call id is the idempotency key: a call run again after a crash records one message.
    email, created = DemoEmail.objects.get_or_create(
        call_id=call_id, defaults={"to": to, "subject": subject, "body": body}
    )
    return f"{'Sent' if created else 'Already sent'}: message {email.id} to {email.to}"
