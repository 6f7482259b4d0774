"""A job's or an agent run's story, read from the project's own rows: the same entries become
its spans (tracing/export.py) and its timeline in the admin, so staff without a tracing backend
see what the trace shows.

A job: its life (``job {feature}``, from submit to its end), one entry per attempt
(``chat {model}`` or ``embeddings {model}``: claimed -> its last ledger row, with model,
provider, tokens, the ledger's cost and, when it failed, the retry class as ``error.type``), and
its waits: a retry's delay (the ledger row's ``retry_delay_seconds``) and the holds without an
attempt (``JobWait``: the rate limiter, a concurrency key, a budget). A fallback shows as the next
attempt's model.

A run: ``invoke_agent {feature}`` over the run and one ``execute_tool {tool}`` per tool call
(approval as an event); each turn is a job of its own whose trace hangs under the run's span.
"""

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from agents.models import AgentRun, AgentStep
from jobs.models import JobAttempt, JobWait, LlmJob
from ledger.models import CostEntry
from tracing.context import TraceParent, child_span_id, parse_traceparent

__all__ = ["Entry", "capture_message_content", "job_timeline", "own_context", "run_timeline"]

ERROR_TYPES = {"rate_limited": "rate_limit", "read_timeout": "timeout"}
"""Our retry classes (jobs/retry_policy.py) as ``error.type``; the others keep their name."""


@dataclass
class Entry:
    kind: str
    """``job``, ``attempt``, ``wait``, ``run``, ``tool``, or ``turn`` (a run's, shown only)."""
    name: str
    span_id: str
    start: datetime
    end: datetime | None
    attributes: dict[str, Any] = field(default_factory=dict)
    error_type: str | None = None
    events: list[tuple[str, datetime, dict[str, Any]]] = field(default_factory=list)
    job_id: str | None = None
    """A run's turn: the job whose own trace tells it."""

    @property
    def seconds(self) -> float | None:
        return None if self.end is None else max(0.0, (self.end - self.start).total_seconds())


def capture_message_content() -> bool:
    """The GenAI conventions' switch: prompts and outputs go into spans only when asked."""
    import os

    value = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
    return value.strip().lower() == "true"


def own_context(traceparent: str, fallback_id: Any) -> TraceParent:
    """A row's own span context; a row from before traces were kept gets ids derived from its
    id (a uuid: 32 hex digits), stable from one export to the next."""
    own = parse_traceparent(traceparent)
    if own is not None:
        return own
    trace_id = fallback_id.hex
    return TraceParent(trace_id, child_span_id(trace_id, "own"))


def _usd(value: Decimal) -> float:
    return float(value)


def job_timeline(job: LlmJob, *, content: bool = False) -> list[Entry]:
    """The job's entries, its own first. ``content``: the prompt and the output on the attempt
    that answered (only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``)."""
    own = own_context(job.traceparent, job.id)
    attempts = {row.attempt: row for row in JobAttempt.objects.filter(job=job)}
    booked: dict[int, list[CostEntry]] = defaultdict(list)
    for row in CostEntry.objects.filter(job=job).order_by("created_at"):
        booked[row.attempt].append(row)
    operation = "embeddings" if job.kind == LlmJob.Kind.EMBEDDING else "chat"
    entries: list[Entry] = []
    ends: list[datetime] = []
    for number in sorted(set(attempts) | set(booked)):
        claimed = attempts.get(number)
        rows = booked.get(number, [])
        attempt = _attempt_entry(job, own, number, claimed, rows, operation=operation)
        if content and attempt.attributes.get("gen_ai.response.finish_reasons"):
            attempt.attributes.update(_content(job))
        entries.append(attempt)
        if attempt.end is not None:
            ends.append(attempt.end)
        for index, row in enumerate(rows):
            if row.retry_delay_seconds:
                entries.append(
                    Entry(
                        "wait",
                        "wait retry",
                        child_span_id(own.span_id, "retry", number, index),
                        row.created_at,
                        row.created_at + timedelta(seconds=row.retry_delay_seconds),
                        {"llmops.wait.reason": "retry", "llmops.retry.class": row.reason_code},
                    )
                )
    for index, wait in enumerate(JobWait.objects.filter(job=job).order_by("started_at")):
        entries.append(
            Entry(
                "wait",
                f"wait {wait.kind}",
                child_span_id(own.span_id, "wait", index),
                wait.started_at,
                wait.started_at + timedelta(seconds=wait.seconds),
                {"llmops.wait.reason": wait.kind, "llmops.wait.holds": wait.holds},
            )
        )
    entries.sort(key=lambda entry: entry.start)
    final = job.status in LlmJob.FINAL_STATUSES
    end = job.completed_at or (max(ends) if ends and final else None)
    if final and end is None:
        end = timezone.now()
    life = Entry(
        "job",
        f"job {job.feature}",
        own.span_id,
        job.created_at,
        end,
        {
            "llmops.job.id": str(job.id),
            "llmops.feature": job.feature,
            "llmops.job.status": job.status,
            "llmops.job.mode": job.mode,
            "llmops.attempts": job.attempts,
            "llmops.cost_usd": _usd(job.cost_usd),
            "gen_ai.request.model": job.model,
        },
        error_type=job.error_code or None if job.status == LlmJob.Status.FAILED else None,
        job_id=str(job.id),
    )
    return [life, *entries]


def _attempt_entry(
    job: LlmJob,
    own: TraceParent,
    number: int,
    claimed: JobAttempt | None,
    rows: list[CostEntry],
    *,
    operation: str,
) -> Entry:
    first = rows[0] if rows else None
    model = claimed.model if claimed is not None else (first.model if first else job.run_model)
    provider = claimed.provider if claimed is not None else (first.provider if first else "")
    if claimed is not None:
        start = claimed.claimed_at
    elif first is not None and first.latency_ms:
        start = first.created_at - timedelta(milliseconds=first.latency_ms)
    else:
        start = first.created_at if first else job.created_at
    end = rows[-1].created_at if rows else None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "llmops.job.id": str(job.id),
        "llmops.attempt": number,
        "llmops.feature": job.feature,
    }
    if operation == "chat":
        attributes["gen_ai.request.max_tokens"] = job.max_tokens
    if claimed is not None and claimed.batch:
        attributes["llmops.batch"] = True
    error_type = None
    if rows:
        attempt_rows = [row for row in rows if row.entry_type == CostEntry.EntryType.ATTEMPT]
        outcome_row = attempt_rows[-1] if attempt_rows else rows[-1]
        cache_read = sum(row.cache_read_tokens for row in rows)
        cache_write = sum(row.cache_write_5m_tokens + row.cache_write_1h_tokens for row in rows)
        uncached = sum(row.input_tokens for row in rows)
        attributes.update(
            {
                # The conventions count cached input inside gen_ai.usage.input_tokens.
                "gen_ai.usage.input_tokens": uncached + cache_read + cache_write,
                "gen_ai.usage.output_tokens": sum(row.output_tokens for row in rows),
                "gen_ai.usage.cache_read.input_tokens": cache_read,
                "gen_ai.usage.cache_creation.input_tokens": cache_write,
                "gen_ai.usage.cost": _usd(sum((row.cost_usd for row in rows), Decimal(0))),
                "llmops.outcome": outcome_row.outcome,
                "llmops.cost.estimated": any(row.is_estimated for row in rows),
            }
        )
        if outcome_row.request_id:
            attributes["gen_ai.response.id"] = outcome_row.request_id
        if outcome_row.http_status:
            attributes["http.response.status_code"] = outcome_row.http_status
        if outcome_row.outcome == CostEntry.Outcome.SUCCESS and not outcome_row.is_superseded:
            attributes["gen_ai.response.model"] = outcome_row.model
            if job.stop_reason and operation == "chat":
                attributes["gen_ai.response.finish_reasons"] = [job.stop_reason]
        elif outcome_row.outcome != CostEntry.Outcome.SUCCESS:
            reason = outcome_row.reason_code or outcome_row.outcome
            error_type = ERROR_TYPES.get(reason, reason)
    return Entry(
        "attempt",
        f"{operation} {model}",
        child_span_id(own.span_id, "attempt", number),
        start,
        end,
        attributes,
        error_type=error_type,
    )


def _content(job: LlmJob) -> dict[str, str]:
    """The prompt and the answer as the conventions' JSON attributes (opt-in only)."""
    if job.kind == LlmJob.Kind.EMBEDDING:
        return {}
    captured = {
        "gen_ai.input.messages": json.dumps(job.request_messages, default=str),
        "gen_ai.output.messages": json.dumps(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": job.output_text or ""}],
                    "finish_reason": job.stop_reason or "",
                }
            ]
        ),
    }
    if job.system is not None:
        captured["gen_ai.system_instructions"] = json.dumps(job.system, default=str)
    return captured


def run_timeline(run: AgentRun) -> list[Entry]:
    """The run's entries, its own first: its tools, and its turns (shown, each exported by its
    own job's trace under the run's span)."""
    own = own_context(run.traceparent, run.id)
    entries: list[Entry] = []
    for step in AgentStep.objects.filter(run=run).select_related("job").order_by("index"):
        if step.kind == AgentStep.Kind.MODEL and step.job is not None:
            job = step.job
            entries.append(
                Entry(
                    "turn",
                    f"chat {job.run_model}",
                    own_context(job.traceparent, job.id).span_id,
                    job.created_at,
                    job.completed_at,
                    {
                        "llmops.turn": step.turn,
                        "llmops.job.id": str(job.id),
                        "llmops.attempts": job.attempts,
                        "llmops.cost_usd": _usd(job.cost_usd),
                        "llmops.job.status": job.status,
                    },
                    job_id=str(job.id),
                )
            )
            continue
        if step.kind != AgentStep.Kind.TOOL or step.started_at is None:
            continue
        tool = Entry(
            "tool",
            f"execute_tool {step.name}",
            child_span_id(own.span_id, "tool", step.index),
            step.started_at,
            step.finished_at,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": step.name,
                "gen_ai.tool.call.id": step.call_id,
                "gen_ai.tool.type": "function",
                "llmops.tool.attempts": step.attempts,
                "llmops.turn": step.turn,
                "llmops.tool.status": step.status,
            },
            error_type="tool_error" if step.is_error else None,
        )
        if step.approved_by_id is not None or step.decision_reason:
            tool.events.append(
                (
                    "llmops.approval",
                    step.started_at,
                    {
                        "llmops.approval.by_user_id": step.approved_by_id or 0,
                        "llmops.tool.status": step.status,
                    },
                )
            )
        entries.append(tool)
    life = Entry(
        "run",
        f"invoke_agent {run.feature}",
        own.span_id,
        run.created_at,
        run.finished_at,
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": run.feature,
            "gen_ai.agent.id": str(run.id),
            "gen_ai.request.model": run.model,
            "llmops.run.id": str(run.id),
            "llmops.feature": run.feature,
            "llmops.run.status": run.status,
            "llmops.turns": run.turns,
            "llmops.cost_usd": _usd(run.cost_usd),
        },
        error_type=run.error_code or None,
    )
    return [life, *entries]
