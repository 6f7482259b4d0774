"""A job's or a run's timeline (tracing/timeline.py) as OpenTelemetry spans, once it has ended.

Spans are made after the fact, with the times the rows hold and the ids the rows fixed at
submit (tracing/context.py): the job's or the run's own span continues the caller's trace (or
starts one), and its children are its attempts, waits and tools. Nothing here runs when tracing
is off; when on, it is a few indexed reads after the transition has committed, and ending a span
only appends it to the batch processor's queue (tracing/setup.py).
"""

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agents.models import AgentRun
from jobs.models import LlmJob
from tracing.context import TraceParent
from tracing.setup import flush_if_forked, preset_ids, tracer
from tracing.timeline import (
    Entry,
    capture_message_content,
    job_timeline,
    own_context,
    run_timeline,
)

__all__ = ["export_job_trace", "export_run_trace"]

if TYPE_CHECKING:
    from opentelemetry import trace

logger = logging.getLogger(__name__)


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def export_job_trace(job: LlmJob) -> None:
    """The job's spans, if tracing is on and the job has ended."""
    active = tracer()
    if active is None or job.status not in LlmJob.FINAL_STATUSES:
        return
    try:
        entries = job_timeline(job, content=capture_message_content())
        _emit(active, entries, own_context(job.traceparent, job.id), job.trace_parent_span_id)
    except Exception:
        logger.exception("traces: job %s could not be exported", job.id)
    flush_if_forked()


def export_run_trace(run: AgentRun) -> None:
    """The run's own span and its tools' (each turn's job exports its own under it)."""
    active = tracer()
    if active is None or run.finished_at is None:
        return
    try:
        entries = [entry for entry in run_timeline(run) if entry.kind != "turn"]
        _emit(active, entries, own_context(run.traceparent, run.id), run.trace_parent_span_id)
    except Exception:
        logger.exception("traces: agent run %s could not be exported", run.id)
    flush_if_forked()


def _emit(
    active: "trace.Tracer", entries: list[Entry], own: TraceParent, caller_span_id: str
) -> None:
    # Imported here: a process with tracing off never loads OpenTelemetry (tracing/setup.py).
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    kinds = {"attempt": SpanKind.CLIENT, "tool": SpanKind.INTERNAL, "wait": SpanKind.INTERNAL}
    life, *children = entries
    if life.end is None:
        return
    flags = TraceFlags(TraceFlags.SAMPLED if own.sampled else TraceFlags.DEFAULT)
    if caller_span_id:
        caller = SpanContext(int(own.trace_id, 16), int(caller_span_id, 16), True, flags)
        parent = trace.set_span_in_context(trace.NonRecordingSpan(caller))
        with preset_ids(span_id=own.span_id):
            root = active.start_span(life.name, parent, start_time=_ns(life.start))
    else:
        with preset_ids(span_id=own.span_id, trace_id=own.trace_id):
            root = active.start_span(life.name, Context(), start_time=_ns(life.start))
    _describe(root, life)
    inside = trace.set_span_in_context(root)
    for entry in children:
        if entry.end is None:
            continue  # still running when the job ended (cut off): nothing to show
        with preset_ids(span_id=entry.span_id):
            span = active.start_span(
                entry.name,
                inside,
                kind=kinds.get(entry.kind, SpanKind.INTERNAL),
                start_time=_ns(entry.start),
            )
        _describe(span, entry)
        span.end(end_time=_ns(max(entry.end, entry.start)))
    root.end(end_time=_ns(max(life.end, life.start)))


def _describe(span: Any, entry: Entry) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attributes(entry.attributes)
    for name, moment, attributes in entry.events:
        span.add_event(name, attributes, timestamp=_ns(moment))
    if entry.error_type:
        span.set_attribute("error.type", entry.error_type)
        span.set_status(Status(StatusCode.ERROR))
