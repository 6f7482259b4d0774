"""Trace context: what a request's W3C ``traceparent`` says, and the ids a job or a run keeps.

A job's span (and a run's) is exported when it ends, in whichever process ends it, but its
children (attempts, waits; a run's turns and tools) and the log lines written meanwhile must
name it before: its ids are fixed when the row is built and kept on it as a ``traceparent``
(``00-<trace id>-<its own span id>-<flags>``), beside the caller's span id
(``trace_parent_span_id``, empty for a trace it starts). An attempt's span id is derived from
the job's and the attempt's number, so the worker's log lines carry the id its span will have.

The caller's context comes from the ``traceparent`` header of the request being served
(bound by the request log middleware, llmops/middleware.py), or from whatever runs a job on a
run's behalf (an agent's turn: ``trace_parent_bound``).
"""

import hashlib
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = [
    "TraceParent",
    "attempt_span_id",
    "child_span_id",
    "current_trace_parent",
    "new_trace_fields",
    "parse_traceparent",
    "trace_id_of",
    "trace_parent_bound",
]

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


@dataclass(frozen=True)
class TraceParent:
    trace_id: str
    """32 lowercase hex digits."""
    span_id: str
    """16 lowercase hex digits."""
    sampled: bool = True

    def header(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


def parse_traceparent(value: str | None) -> TraceParent | None:
    """A W3C ``traceparent`` header's context, or None when it is absent or not valid (a bad
    header starts a new trace, as the specification asks; it is never an error)."""
    if not value:
        return None
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    # Version ff is invalid; version 00 has nothing after the flags.
    if version == "ff" or (version == "00" and rest):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceParent(trace_id, span_id, sampled=bool(int(flags, 16) & 1))


_current: ContextVar[TraceParent | None] = ContextVar("llmops_trace_parent", default=None)


@contextmanager
def trace_parent_bound(parent: TraceParent | None) -> Iterator[None]:
    """What a job or a run built in the block continues: the request's caller, or a run."""
    token = _current.set(parent)
    try:
        yield
    finally:
        _current.reset(token)


def current_trace_parent() -> TraceParent | None:
    return _current.get()


def _new_span_id() -> str:
    while True:
        span_id = secrets.token_hex(8)
        if span_id != "0" * 16:
            return span_id


def new_trace_fields() -> dict[str, str]:
    """The trace fields of a new job or run (``traceparent``, ``trace_parent_span_id``): a
    child of the bound caller's span, or the root of a new trace."""
    parent = current_trace_parent()
    if parent is None:
        own = TraceParent(secrets.token_hex(16), _new_span_id())
        return {"traceparent": own.header(), "trace_parent_span_id": ""}
    own = TraceParent(parent.trace_id, _new_span_id(), sampled=parent.sampled)
    return {"traceparent": own.header(), "trace_parent_span_id": parent.span_id}


def child_span_id(span_id: str, *parts: object) -> str:
    """A child's span id derived from its parent's and what it is (``"attempt", 3``): the same
    in every process, so a log line written during an attempt names the span exported later."""
    seed = ":".join([span_id, *(str(part) for part in parts)]).encode()
    derived = hashlib.sha256(seed).hexdigest()[:16]
    return derived if derived != "0" * 16 else "0" * 15 + "1"


def attempt_span_id(traceparent: str, attempt: int) -> str | None:
    """The span id of a job's attempt ``attempt`` (``chat {model}``), from the job's own."""
    own = parse_traceparent(traceparent)
    return None if own is None else child_span_id(own.span_id, "attempt", attempt)


def trace_id_of(traceparent: str) -> str | None:
    own = parse_traceparent(traceparent)
    return None if own is None else own.trace_id
