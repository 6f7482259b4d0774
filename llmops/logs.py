"""Structured logs: one JSON object per line, carrying the job and the request it is about.

Every process (web, workers, reconciler, monitor) logs through the root handler configured in
``settings.LOGGING``; ``LOG_FORMAT=json`` (the default) formats each record with
``JsonFormatter``, ``LOG_FORMAT=plain`` with ``PlainFormatter`` (the human format, with the same
context appended). A line looks like::

    {"ts": "2026-11-29T10:04:05.123Z", "level": "INFO", "logger": "jobs.transitions",
     "message": "job 3f2c... completed status=completed ...", "request_id": "...",
     "job_id": "3f2c...", "feature": "email-classify", "model": "claude-sonnet-4-6",
     "attempt": 1, "provider_request_id": "req_..."}

The context (``request_id``, ``job_id``, ``feature``, ``model``, ``attempt``,
``provider_request_id``) lives in one ``ContextVar``: each thread and each asyncio task sees its
own, so concurrent requests and jobs on threads never mix. ``log_context(...)`` binds fields for
a block and restores the previous ones after it; ``bind_log_context(...)`` adds fields inside
such a block (they go when the block ends). A new ``threading.Thread`` starts with an empty
context: start it with ``contextvars.copy_context().run`` to keep the caller's.

A log call may add fields with ``extra={...}``; only the names in ``EXTRA_FIELDS`` are written
(a whitelist: nothing reaches the logs by accident), serialised with ``default=str``.

This module imports nothing from Django: settings.py names its formatters.
"""

import contextvars
import json
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

__all__ = [
    "CONTEXT_FIELDS",
    "EXTRA_FIELDS",
    "JsonFormatter",
    "PlainFormatter",
    "bind_log_context",
    "current_log_context",
    "log_context",
]

CONTEXT_FIELDS = (
    "request_id",
    "trace_id",
    "span_id",
    "job_id",
    "feature",
    "model",
    "attempt",
    "provider_request_id",
)
"""What ties a line to a request and a job; written in this order, each only when known."""

EXTRA_FIELDS = frozenset(
    {
        *CONTEXT_FIELDS,
        "transition",
        "status",
        "cost_usd",
        "error_code",
        "outcome",
        "queue",
        "loop",
        "rq_job_id",
        "method",
        "path",
        "status_code",
        "duration_ms",
    }
)
"""The names a log call may add with ``extra={...}``. Anything else given there is dropped: a
prompt, an answer, a key or an alert target must never be one of them."""

_RESERVED = ("ts", "level", "logger", "message", "exc", "stack")

_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "llmops_log_context", default=MappingProxyType({})
)
"""Never mutated in place: every change sets a new dict, so a copied context cannot see it."""

# rq colours its lines when stdout is a terminal; escape codes are noise in a JSON value.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _known(fields: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise TypeError(f"not a log context field: {', '.join(sorted(unknown))}")
    return {name: value for name, value in fields.items() if value is not None and value != ""}


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Bind context fields (a ``None`` or empty value is left out) for the block."""
    token = _context.set({**_context.get(), **_known(fields)})
    try:
        yield
    finally:
        _context.reset(token)


def bind_log_context(**fields: Any) -> None:
    """Add fields to the current context. Use it inside a ``log_context`` block only: the
    block's end removes them; outside one they would stay with the thread (a pool's thread
    would carry them into its next job)."""
    _context.set({**_context.get(), **_known(fields)})


def current_log_context() -> dict[str, Any]:
    return dict(_context.get())


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's context (bound when it was formatted, in the thread that logged it), then
    its whitelisted extras, which win: they describe this very line."""
    fields = dict(_context.get())
    from_rq = record.name == "rq" or record.name.startswith("rq.")
    for name, value in record.__dict__.items():
        if name == "job_id" and from_rq:
            # rq's own extra names its RQ job, not our LlmJob.
            fields["rq_job_id"] = value
        elif name in EXTRA_FIELDS and value is not None:
            fields[name] = value
    return fields


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, the context, exc when raised."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": _ANSI.sub("", record.getMessage()),
        }
        for name, value in _fields(record).items():
            if name not in _RESERVED:
                entry[name] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        try:
            return json.dumps(entry, default=_safe_str, allow_nan=False)
        except (TypeError, ValueError):
            # A circular or otherwise unserialisable extra: keep the line, lose the extras.
            core = {key: entry[key] for key in _RESERVED if key in entry}
            return json.dumps(core, default=_safe_str)


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the log line
        return f"<unprintable {type(value).__name__}>"


class PlainFormatter(logging.Formatter):
    """The human format (``LOG_FORMAT=plain``): time, level, logger, message, then the context
    as ``[key=value ...]`` when there is any."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        line = super().formatMessage(record)
        fields = _fields(record)
        if fields:
            line += " [" + " ".join(f"{k}={v}" for k, v in fields.items()) + "]"
        return line
