"""The nearest known name to one that is not known, for a refusal's "Did you mean ...?"
(an unknown model, an unknown tool)."""

import difflib
from collections.abc import Iterable

__all__ = ["nearest_name"]

CUTOFF = 0.8
"""How alike two names must be (difflib's ratio): a typo (``claude-sonet-4-6``, ``calculater``)
passes, another name of the same family (``claude-haiku-4-5`` for ``claude-opus-4-1``) does
not."""


def nearest_name(name: str, known: Iterable[str]) -> str | None:
    near = difflib.get_close_matches(name, list(known), n=1, cutoff=CUTOFF)
    return near[0] if near else None
