"""The demo calculator: ordinary arithmetic answers; a number too large to hold refuses in
microseconds, before any step that would hold the GIL past the tool's timeout."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.tools import tool_call

ROOT = Path(__file__).resolve().parent.parent.parent

BOMBS = [
    "((((9**99)**99)**99)**99)**99",  # 30 gigabits by the fifth power
    "9**9**9**9",
    "(10**1000)*(10**1000)*(10**1000)*(10**1000)",
    "*".join(["((9**99)**9)"] * 14),
    "(9**99)**99*(9**99)**99",
    "2**4096",
    "1e308*10",
    "1.5**(10**1000)",
]

# A fresh process, so that a calculator still computing can be killed: inside a thread it holds
# the GIL and can only be left behind. Django starts first; the bound covers the calls alone.
EVALUATE = """
import json, sys
import django
django.setup()
from agents.tools import ToolError, registered_tool
calculator = registered_tool("calculator").function
print("ready", flush=True)
answers = []
for expression in json.loads(sys.argv[1]):
    try:
        answers.append(["value", calculator(expression=expression)])
    except ToolError as exc:
        answers.append(["error", str(exc)])
with open(sys.argv[2], "w") as out:
    json.dump(answers, out)
"""


def calculate_in_a_process(
    expressions: list[str], *, bound_seconds: float, tmp_path: Path
) -> list[list[str]]:
    answers, errors = tmp_path / "answers.json", tmp_path / "stderr.txt"
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "llmops.settings", "PYTHONPATH": "."}
    with errors.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", EVALUATE, json.dumps(expressions), str(answers)],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n", errors.read_text()
        try:
            process.wait(timeout=bound_seconds)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the calculator was still computing after {bound_seconds:g} s"
            ) from None
    finally:
        process.kill()
        process.wait()
        process.stdout.close()  # type: ignore[union-attr]
    assert process.returncode == 0, errors.read_text()
    return json.loads(answers.read_text())  # type: ignore[no-any-return]


def test_it_refuses_number_bombs_and_returns_instead_of_stalling_the_worker(tmp_path):
    answers = calculate_in_a_process(BOMBS, bound_seconds=5, tmp_path=tmp_path)

    for expression, (kind, message) in zip(BOMBS, answers, strict=True):
        assert kind == "error", expression
        assert "result too large" in message, expression


@pytest.mark.parametrize(
    ("expression", "answer"),
    [
        ("6*7", "42"),
        ("-(3+4)*2", "-14"),
        ("7/2", "3.5"),
        ("7 // 2", "3"),
        ("10 % 3", "1"),
        ("2**-1", "0.5"),
        ("2.5**2", "6.25"),
        ("10**100", str(10**100)),
        ("2**4095", str(2**4095)),  # the largest integer kept
        ("(2**2048)*(2**2047)", str(2**4095)),
        ("1**(10**1000)", "1"),
    ],
)
def test_it_answers_ordinary_arithmetic(expression, answer):
    outcome = tool_call(name="calculator", tool_input={"expression": expression}, call_id="c")

    assert not outcome.is_error
    assert outcome.output == answer


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("(10**1000)*(10**1000)", "result too large"),
        ("1e308*10", "result too large"),
        ("(-8)**0.5", "not a real number"),
        ("1/0", "division by zero"),
        ("0**-1", "division by zero"),
        ("+".join(["1"] * 51), "more than 100 numbers and operators"),
        ("True+1", "only numbers"),
    ],
)
def test_it_refuses_what_is_not_a_finite_real_number_or_too_long(expression, message):
    outcome = tool_call(name="calculator", tool_input={"expression": expression}, call_id="c")

    assert outcome.is_error
    assert message in outcome.output
