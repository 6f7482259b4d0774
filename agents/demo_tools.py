"""Demo tools for ``make run``, the live page and the README: no network, no real mail.
Registered by the default ``LLM_AGENT_TOOL_MODULES``; set it without this module in production.
"""

import ast
import math
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
"""Characters in an expression (the input schema's ``maxLength``)."""
MAX_NODES = 100
"""Numbers and operators in an expression: more than a model's arithmetic needs, and a bound
that holds when the tool is called without its schema."""
MAX_INTEGER_BITS = 4096
"""The largest integer any step may make (about 1,230 digits). Each step's size is estimated
before it runs, because one big multiplication holds the GIL and cannot be stopped: the tool's
timeout would only leave it behind, growing. At this size every step takes microseconds."""

Number = int | float


def _too_large() -> ToolError:
    return ToolError(
        f"result too large (the calculator keeps integers within {MAX_INTEGER_BITS} bits and"
        " floats finite)"
    )


def _checked(value: Any) -> Number:
    if isinstance(value, complex):
        raise ToolError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise _too_large()
    if isinstance(value, int) and value.bit_length() > MAX_INTEGER_BITS:
        raise _too_large()
    return value  # type: ignore[no-any-return]


def _integer_bits_estimate(op: ast.operator, left: int, right: int) -> float:
    """The bits of ``left op right`` give or take one, known without computing it (``_checked``
    has the exact word on a result)."""
    if isinstance(op, ast.Mult):
        return left.bit_length() + right.bit_length() - 1
    if isinstance(op, ast.Pow) and right > 0 and abs(left) > 1:
        if right > MAX_INTEGER_BITS:  # |left| >= 2, so at least 2**right
            return right
        return right * math.log2(abs(left))
    # + and - add one bit to operands already bounded; / // % make nothing larger; a negative
    # power is a float.
    return 0


def _binary(op: ast.operator, left: Number, right: Number) -> Number:
    if isinstance(left, int) and isinstance(right, int):
        if _integer_bits_estimate(op, left, right) > MAX_INTEGER_BITS:
            raise _too_large()
    try:
        return _checked(_OPERATORS[type(op)](left, right))
    except OverflowError as exc:  # a float step, or an integer too large for a float
        raise _too_large() from exc


def _evaluate(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        if isinstance(node.value, bool):
            raise ToolError("only numbers are allowed")
        return _checked(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _binary(node.op, _evaluate(node.left), _evaluate(node.right))
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
    if len(expression) > MAX_EXPRESSION:
        raise ToolError(f"expression longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not an expression: {exc.msg}") from exc
    if sum(isinstance(node, ast.expr) for node in ast.walk(tree)) > MAX_NODES:
        raise ToolError(f"expression has more than {MAX_NODES} numbers and operators")
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
    # call_id is the idempotency key (the same on every attempt of this call): the call run
    # again after its worker died mid-call, or two copies at once, record one message
    # (DemoEmail.call_id is unique; get_or_create reads the winner's row). A real mailer passes
    # it to its provider as the idempotency key, or records it in the transaction of the send.
    email, created = DemoEmail.objects.get_or_create(
        call_id=call_id, defaults={"to": to, "subject": subject, "body": body}
    )
    return f"{'Sent' if created else 'Already sent'}: message {email.id} to {email.to}"
