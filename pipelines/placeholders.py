"""``{{previous}}``: where a step's body takes the previous step's output text.

Filled in the string content of each message, in the ``text`` of each message's text blocks,
and in ``system`` (a string or its text blocks), when the step's job is created. Spaces inside
the braces are allowed (``{{ previous }}``). Nothing else is templated: blocks of other types
(images, documents, tool results) are left as sent.
"""

import copy
import re
from typing import Any

__all__ = ["PREVIOUS", "fill_previous", "uses_previous"]

PREVIOUS = re.compile(r"\{\{\s*previous\s*\}\}")


def _strings(body: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(container, key) of every string the placeholder may appear in."""
    places: list[tuple[Any, Any]] = []

    def content_of(container: Any, key: Any) -> None:
        value = container[key]
        if isinstance(value, str):
            places.append((container, key))
        elif isinstance(value, list):
            for block in value:
                if isinstance(block, dict) and block.get("type") == "text":
                    if isinstance(block.get("text"), str):
                        places.append((block, "text"))

    for message in body.get("messages") or []:
        if isinstance(message, dict) and "content" in message:
            content_of(message, "content")
    if body.get("system") is not None:
        content_of(body, "system")
    return places


def uses_previous(body: dict[str, Any]) -> bool:
    return any(PREVIOUS.search(container[key]) for container, key in _strings(body))


def fill_previous(body: dict[str, Any], previous: str) -> dict[str, Any]:
    """A copy of ``body`` with every ``{{previous}}`` replaced by ``previous``."""
    filled = copy.deepcopy(body)
    for container, key in _strings(filled):
        # A function, not a replacement string: the output's own backslashes stay as they are.
        container[key] = PREVIOUS.sub(lambda _match: previous, container[key])
    return filled
