"""A job's or a run's timeline as the admin shows it: the entries its trace is made of
(tracing/timeline.py), read from the rows, with the trace id (a link to the tracing backend when
``LLM_TRACE_URL_TEMPLATE`` is set)."""

from datetime import datetime

from django.conf import settings
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from agents.models import AgentRun
from jobs.models import LlmJob
from tracing.context import TraceParent
from tracing.timeline import Entry, job_timeline, own_context, run_timeline

__all__ = ["job_timeline_cell", "run_timeline_cell"]

_DETAILS = (
    ("gen_ai.provider.name", "provider {}"),
    ("gen_ai.usage.input_tokens", "in {}"),
    ("gen_ai.usage.output_tokens", "out {}"),
    ("gen_ai.usage.cost", "${:.6f}"),
    ("llmops.cost_usd", "${:.6f}"),
    ("llmops.outcome", "{}"),
    ("llmops.wait.holds", "{} holds"),
    ("gen_ai.tool.call.id", "call {}"),
    ("llmops.job.status", "{}"),
    ("llmops.run.status", "{}"),
    ("llmops.tool.status", "{}"),
)


def job_timeline_cell(job: LlmJob) -> SafeString:
    return _cell(job_timeline(job), own_context(job.traceparent, job.id))


def run_timeline_cell(run: AgentRun) -> SafeString:
    return _cell(run_timeline(run), own_context(run.traceparent, run.id))


def _trace_link(own: TraceParent) -> SafeString:
    template = settings.LLM_TRACE_URL_TEMPLATE
    if template:
        url = template.replace("{trace_id}", own.trace_id)
        return format_html('trace <a href="{}" rel="noopener">{}</a>', url, own.trace_id)
    return format_html("trace <code>{}</code>", own.trace_id)


def _offset(start: datetime, origin: datetime) -> str:
    return f"+{(start - origin).total_seconds():.3f}s"


def _details(entry: Entry) -> str:
    parts = []
    for name, template in _DETAILS:
        value = entry.attributes.get(name)
        if value not in (None, ""):
            parts.append(template.format(value))
    if entry.error_type:
        parts.append(f"error.type={entry.error_type}")
    return ", ".join(parts)


def _cell(entries: list[Entry], own: TraceParent) -> SafeString:
    life = entries[0]
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
        (
            (
                ("\u00a0\u00a0" if entry is not life else "") + entry.name,
                _offset(entry.start, life.start),
                "running" if entry.seconds is None else f"{entry.seconds:.3f}s",
                _details(entry),
                entry.span_id,
            )
            for entry in entries
        ),
    )
    return format_html(
        '<p>{}</p><table class="llmops-timeline"><thead><tr><th>span</th><th>start</th>'
        "<th>duration</th><th>details</th><th>span id</th></tr></thead><tbody>{}</tbody>"
        "</table>",
        _trace_link(own),
        rows,
    )
