"""Messages a job points at instead of storing: an agent run's turn (agents/) names its run and
the step it comes before, and its transcript is rebuilt from the run's committed steps, so a
50-turn run stores its transcript once, not once per turn (which grew as the square of its
length).

An app registers a resolver for its kind at start (``register``); ``resolve`` calls it and checks
the result against the digest stored with the reference when the job was submitted: a job is
never sent with messages other than the ones validated, priced and budgeted at submit. jobs/
imports no app that points at messages.
"""

import hashlib
import json
from collections.abc import Callable
from typing import Any

__all__ = ["MessagesRefError", "digest", "make_ref", "register", "resolve"]

Resolver = Callable[[dict[str, Any]], list[dict[str, Any]]]

_resolvers: dict[str, Resolver] = {}


class MessagesRefError(RuntimeError):
    """A reference that cannot be resolved to the messages it was made from."""


def digest(messages: list[dict[str, Any]]) -> str:
    canonical = json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def make_ref(kind: str, messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A reference of ``kind`` to these messages; ``fields`` are what its resolver reads."""
    if kind not in _resolvers:
        raise MessagesRefError(f"no resolver registered for messages of kind {kind!r}")
    return {**fields, "kind": kind, "sha256": digest(messages)}


def register(kind: str, resolver: Resolver) -> None:
    _resolvers[kind] = resolver


def resolve(ref: dict[str, Any]) -> list[dict[str, Any]]:
    kind = ref.get("kind")
    resolver = _resolvers.get(str(kind))
    if resolver is None:
        raise MessagesRefError(f"no resolver registered for messages of kind {kind!r}")
    messages = resolver(ref)
    if digest(messages) != ref.get("sha256"):
        raise MessagesRefError(
            f"the messages of {kind} {ref!r} rebuilt differently from the ones submitted"
        )
    return messages
