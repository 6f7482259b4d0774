"""The code blocks of README.md and docs/*.md, read for tests/test_docs_snippets.py: each fenced
block with its language and the marker before it, a shell block split into its commands and the
sample answer shown under each, and that sample read and compared with a real answer.

Markers (an HTML comment on the line before the fence, invisible on the rendered page):

- ``<!-- not-run: why -->``: a block that cannot run against the test stack (``make run`` itself,
  production configuration, a browser page); the reason is required.
- ``<!-- run: NAME ... -->``: a block run by the check NAME of the test instead of as it is (a
  socket that listens until stopped, a function the test calls).

``sh``, ``bash`` and ``python`` blocks run unless marked; ``json``, ``yaml`` and ``text`` blocks
are data (answers, events, output) and never run; any other block must carry a marker.

A sample answer is the comment right under a command that starts with ``{`` or ``[``: JSON
where ``...`` stands for what is left out. Compared with the real answer, every field it names
must be there; a status, kind, name, type, mode or stop reason it shows, and any true, false or
null, must be the real one; an id shown as ``"6f0c..."`` (or an integer ``"id"``) is bound to the
real id, and the commands after it in the block use the real one.
"""

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DATA_LANGUAGES",
    "ELLIPSIS",
    "RUN_LANGUAGES",
    "Block",
    "Step",
    "compare",
    "doc_blocks",
    "parse_samples",
    "shell_steps",
    "substitute",
]

RUN_LANGUAGES = frozenset({"sh", "bash", "python"})
DATA_LANGUAGES = frozenset({"json", "yaml", "text"})
CLAIM_KEYS = frozenset({"status", "stop_reason", "kind", "name", "type", "mode"})
"""Fields whose value in a sample is a claim (the rest of a sample's strings are examples)."""

_FENCE = re.compile(r"^\s*```(\S*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(not-run|run):\s*(.*?)\s*-->\s*$")
_PLACEHOLDER = re.compile(r"^[\w-]+\.\.\.$")


@dataclass(frozen=True)
class Block:
    path: str
    line: int
    """The opening fence's line, from 1."""
    language: str
    text: str
    marker: tuple[str, str] | None
    """("not-run", reason) or ("run", check), from the comment before the fence."""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def doc_blocks(root: Path) -> list[Block]:
    """Every fenced block of README.md and docs/*.md, in reading order."""
    paths = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    found: list[Block] = []
    for path in paths:
        lines = path.read_text().splitlines()
        opened: tuple[int, str] | None = None
        for number, line in enumerate(lines):
            fence = _FENCE.match(line)
            if not fence:
                continue
            if opened is None:
                opened = (number, fence.group(1))
                continue
            start, language = opened
            opened = None
            body = "\n".join(lines[start + 1 : number])
            found.append(
                Block(str(path.relative_to(root)), start + 1, language, body, _marker(lines, start))
            )
    return found


def _marker(lines: list[str], fence: int) -> tuple[str, str] | None:
    previous = next((line for line in reversed(lines[:fence]) if line.strip()), "")
    match = _MARKER.match(previous)
    return (match.group(1), match.group(2)) if match else None


@dataclass(frozen=True)
class Step:
    command: str
    sample: str | None
    """The sample answer under the command, without its ``#`` marks."""


def shell_steps(text: str) -> list[Step]:
    """A shell block's commands (a command spans its continued lines and open quotes), each
    with the sample answer commented right under it, if any."""
    lines = text.splitlines()
    steps: list[Step] = []
    at = 0
    while at < len(lines):
        if not lines[at].strip() or lines[at].lstrip().startswith("#"):
            at += 1
            continue
        command = [lines[at]]
        at += 1
        while at < len(lines) and _continues("\n".join(command)):
            command.append(lines[at])
            at += 1
        comments: list[str] = []
        while at < len(lines) and lines[at].lstrip().startswith("#"):
            comments.append(lines[at].lstrip()[1:])
            at += 1
        sample = "\n".join(comments) if comments and comments[0].lstrip()[:1] in "{[" else None
        steps.append(Step("\n".join(command), sample))
    return steps


def _continues(command: str) -> bool:
    if command.rstrip().endswith("\\"):
        return True
    try:
        shlex.split(command, comments=True)
    except ValueError:  # a quote still open
        return True
    return False


# --- samples ----------------------------------------------------------------------------------


class _Ellipsis:
    def __repr__(self) -> str:
        return "..."


ELLIPSIS = _Ellipsis()
"""What a sample leaves out: ``...`` where a value or a member would be."""

_TOKEN = re.compile(
    r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)'
    r"|(?P<word>true|false|null)|(?P<ellipsis>\.\.\.)|(?P<mark>[{}\[\]:,]))"
)


def parse_samples(text: str) -> list[Any]:
    """The JSON values of a sample, one after the other, where ``...`` may stand for a member,
    an element or a value (``ELLIPSIS``); raises ValueError."""
    tokens: list[tuple[str, Any]] = []
    at = 0
    while text[at:].strip():
        match = _TOKEN.match(text, at)
        if not match:
            raise ValueError(f"not JSON at {text[at : at + 40].strip()!r}")
        kind = match.lastgroup or ""
        raw = match.group(kind)
        tokens.append((kind, raw if kind == "mark" else _literal(kind, raw)))
        at = match.end()
    values = []
    position = 0
    while position < len(tokens):
        value, position = _value(tokens, position)
        values.append(value)
    return values


def _literal(kind: str, raw: str) -> Any:
    if kind == "ellipsis":
        return ELLIPSIS
    return json.loads(raw)


def _value(tokens: list[tuple[str, Any]], at: int) -> tuple[Any, int]:
    kind, raw = tokens[at]
    if kind != "mark":
        return raw, at + 1
    if raw not in "{[":
        raise ValueError(f"unexpected {raw!r}")
    closing = "}" if raw == "{" else "]"
    members: dict[str, Any] = {}
    elements: list[Any] = []
    at += 1
    while True:
        if at >= len(tokens):
            raise ValueError(f"{closing!r} missing")
        kind, item = tokens[at]
        if (kind, item) == ("mark", closing):
            return (members if raw == "{" else elements), at + 1
        if (kind, item) == ("mark", ","):
            at += 1
        elif item is ELLIPSIS:
            at += 1
            if raw == "[":
                elements.append(ELLIPSIS)
        elif raw == "{":
            if kind != "string" or tokens[at + 1] != ("mark", ":"):
                raise ValueError(f"a member's name and ':' expected, not {item!r}")
            members[item], at = _value(tokens, at + 2)
        else:
            value, at = _value(tokens, at)
            elements.append(value)


def compare(sample: Any, actual: Any, bindings: dict[str, str], path: str = "") -> list[str]:
    """How ``actual`` differs from what ``sample`` claims (empty: it holds); binds the sample's
    placeholder ids to the real ones in ``bindings`` as it goes."""
    if isinstance(sample, dict):
        if not isinstance(actual, dict):
            return [f"{path or 'the answer'} is {type(actual).__name__}, not an object"]
        problems = []
        for key, value in sample.items():
            where = f"{path}.{key}" if path else key
            if key not in actual:
                problems.append(f"{where} is missing")
            else:
                problems += _compare_member(key, value, actual[key], bindings, where)
        return problems
    if isinstance(sample, list):
        if not isinstance(actual, list):
            return [f"{path} is {type(actual).__name__}, not a list"]
        shown = [item for item in sample if item is not ELLIPSIS]
        if len(actual) < len(shown):
            return [f"{path} has {len(actual)} items, the sample shows {len(shown)}"]
        problems = []
        for index, item in enumerate(shown):
            problems += compare(item, actual[index], bindings, f"{path}[{index}]")
        return problems
    return _compare_member("", sample, actual, bindings, path)


def _compare_member(
    key: str, value: Any, actual: Any, bindings: dict[str, str], where: str
) -> list[str]:
    if isinstance(value, (dict, list)):
        return compare(value, actual, bindings, where)
    placeholder = _placeholder(key, value)
    if placeholder is not None:
        if actual is None:
            return [f"{where} is null, the sample shows {placeholder}"]
        if placeholder not in bindings:
            bindings[placeholder] = str(actual)
            return []
        if bindings[placeholder] == str(actual):
            return []
        return [f"{where} is {actual!r}, not {placeholder} ({bindings[placeholder]})"]
    claimed = value is None or isinstance(value, bool) or (key in CLAIM_KEYS and value != "...")
    if claimed and isinstance(value, str) and value.endswith("..."):
        return [] if str(actual).startswith(value[:-3]) else [f"{where} is {actual!r}"]
    if claimed and actual != value:
        return [f"{where} is {actual!r}, the sample says {value!r}"]
    return []


def _placeholder(key: str, value: Any) -> str | None:
    """The placeholder a sample value is (``"6f0c..."``, an integer ``id``), if it is one."""
    if isinstance(value, str) and _PLACEHOLDER.match(value):
        return value
    if key == "id" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def substitute(command: str, bindings: dict[str, str]) -> str:
    """The command with each bound placeholder replaced by its real id (an integer id only as
    a path segment: ``/keys/12/rotate/``)."""
    for placeholder, real in bindings.items():
        if placeholder.isdigit():
            command = re.sub(rf"(?<=/){placeholder}(?=/)", real, command)
        else:
            command = command.replace(placeholder, real)
    return command
