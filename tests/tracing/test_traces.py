"""Traces end to end: a real OTLP/HTTP receiver (tests/otlp_receiver.py) set by the standard
variables, the real OpenTelemetry SDK and exporter, a real worker process (``manage.py rqworker
llm``) or real RQ workers in this process, the fake provider over HTTP, MariaDB and Redis.

- A job submitted with a W3C ``traceparent`` through a 429 storm: four ``chat`` spans in the
  caller's trace under the job's span, three with ``error.type``, the last with model, provider,
  tokens and the ledger's cost, which is what the provider billed; no span holds the prompt; the
  worker's log lines carry the trace and the attempt's span id.
- An agent run: ``invoke_agent``, the turns' ``chat`` spans and ``execute_tool`` in one trace.
- Prompts and outputs only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
- A collector that hangs never holds the job path: jobs complete while the exporter waits, and
  the spans it could not send are counted on /metrics.
"""

import json
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from jobs.models import LlmJob
from ledger.models import CostEntry
from llmops.queues import LLM_QUEUE
from tests.agents.conftest import (  # noqa: F401
    AgentWorkers,
    agent_workers,
    call,
    run_body,
    start_run,
)
from tests.conftest import FakeProvider, submit
from tests.gateway.conftest import billed_usd
from tests.jobs.test_takeover import Processes, processes, wait_for, worker_env  # noqa: F401
from tests.metrics.test_metrics import metrics_settings, scrape  # noqa: F401
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from tracing.context import child_span_id, parse_traceparent
from tracing.setup import SPAN_COUNTS_KEY, tracing_reset

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
PROMPT = "Summarise the zebra-4471 incident report for the on-call team"


def _otel_env(receiver: OtlpReceiver, **extra: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "llmops-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        **extra,
    }


@pytest.fixture
def traced_here(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """Tracing on in this process (its in-process workers export from here)."""
    with OtlpReceiver() as receiver:
        for name, value in _otel_env(receiver).items():
            monkeypatch.setenv(name, value)
        tracing_reset()
        try:
            yield receiver
        finally:
            monkeypatch.undo()
            tracing_reset()


def _no_prompt_anywhere(spans: list[ReceivedSpan], text: str) -> None:
    for span in spans:
        assert text not in json.dumps(span.attributes), span
        assert text not in json.dumps(span.events), span


def test_a_job_through_a_429_storm_gives_four_chat_spans_in_the_callers_trace(
    alice_client: Any,
    fake_provider: FakeProvider,
    processes: Processes,  # noqa: F811
) -> None:
    fake_provider.http.post("/_fake/faults", json={"next": ["429", "429", "429", "ok"]})
    with OtlpReceiver() as receiver:
        env = worker_env(
            fake_provider,
            LLM_RETRY_DELAY_SCALE="0.001",
            LLM_RATE_LIMIT_ENABLED="False",
            LLM_BREAKER_ENABLED="False",
            **_otel_env(receiver),
        )
        processes.start(env, "rqworker", LLM_QUEUE, "--with-scheduler")
        response = alice_client.post(
            "/api/v1/jobs/",
            {
                "feature": "summarize",
                "model": "claude-sonnet-4-6",
                "max_tokens": 200,
                "messages": [{"role": "user", "content": PROMPT}],
            },
            format="json",
            HTTP_TRACEPARENT=TRACEPARENT,
        )
        assert response.status_code == 202, response.content
        job = LlmJob.objects.get(id=response.json()["id"])
        own = parse_traceparent(job.traceparent)
        assert own is not None and own.trace_id == CALLER_TRACE
        assert job.trace_parent_span_id == CALLER_SPAN
        spans = receiver.wait_for(
            lambda spans: any(s.name == "job summarize" for s in spans),
            timeout=120,
            what="the job's spans",
        )
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 4
    (life,) = [s for s in spans if s.name == "job summarize"]
    assert (life.trace_id, life.span_id, life.parent_span_id) == (
        CALLER_TRACE,
        own.span_id,
        CALLER_SPAN,
    )
    assert life.service == "llmops-test"
    assert life.attributes["llmops.job.id"] == str(job.id)
    chats = sorted(
        (s for s in spans if s.name == "chat claude-sonnet-4-6"),
        key=lambda s: s.attributes["llmops.attempt"],
    )
    assert [s.attributes["llmops.attempt"] for s in chats] == [1, 2, 3, 4]
    for span in chats:
        assert span.trace_id == CALLER_TRACE and span.parent_span_id == own.span_id
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.request.model"] == "claude-sonnet-4-6"
        assert span.attributes["gen_ai.request.max_tokens"] == 200
        assert span.kind == 3  # CLIENT
    failed, last = chats[:3], chats[3]
    for span in failed:
        assert span.attributes["error.type"] == "rate_limit"
        assert span.status_code == 2  # ERROR
        assert span.attributes["http.response.status_code"] == 429
    assert "error.type" not in last.attributes
    assert last.attributes["gen_ai.provider.name"] == "anthropic"
    assert last.attributes["gen_ai.response.model"] == "claude-sonnet-4-6"
    assert last.attributes["gen_ai.response.finish_reasons"] == [job.stop_reason]
    assert last.attributes["gen_ai.usage.output_tokens"] == job.output_tokens > 0
    assert last.attributes["gen_ai.usage.input_tokens"] == job.input_tokens > 0
    # The ledger's figure for that attempt, and what the provider billed for the job.
    success = CostEntry.objects.get(job=job, attempt=4)
    assert Decimal(str(last.attributes["gen_ai.usage.cost"])) == success.cost_usd
    assert success.cost_usd == billed_usd(fake_provider, job.id) > 0
    # The retries' delays show as waits of the job.
    waits = [s for s in spans if s.name == "wait retry"]
    assert len(waits) == 3 and all(s.parent_span_id == own.span_id for s in waits)
    _no_prompt_anywhere(spans, "zebra-4471")
    # The worker's lines of the last attempt name its span.
    lines = [json.loads(line) for line in processes.output().splitlines() if line.startswith("{")]
    attempt_lines = [
        line for line in lines if line.get("job_id") == str(job.id) and line.get("attempt") == 4
    ]
    assert attempt_lines
    assert all(line["trace_id"] == CALLER_TRACE for line in attempt_lines)
    assert all(line["span_id"] == last.span_id for line in attempt_lines)
    assert last.span_id == child_span_id(own.span_id, "attempt", 4)


def test_an_agent_run_gives_invoke_agent_chat_and_execute_tool_spans_in_one_trace(
    alice_client: Any,
    traced_here: OtlpReceiver,
    agent_workers: AgentWorkers,  # noqa: F811
) -> None:
    workers = agent_workers
    run = start_run(alice_client, run_body([call("add", a=2, b=3)]))
    workers.drain()
    run.refresh_from_db()
    assert run.status == "completed", (run.error_code, run.error_message)
    own = parse_traceparent(run.traceparent)
    assert own is not None
    spans = traced_here.wait_for(
        lambda spans: any(s.name == "invoke_agent agent-test" for s in spans)
        and sum(s.name.startswith("chat ") for s in spans) >= 2,
        timeout=30,
        what="the run's spans",
    )
    assert {s.trace_id for s in spans} == {own.trace_id}
    (agent,) = [s for s in spans if s.name == "invoke_agent agent-test"]
    assert agent.span_id == own.span_id and agent.parent_span_id == ""
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.agent.id"] == str(run.id)
    (tool,) = [s for s in spans if s.name == "execute_tool add"]
    assert tool.parent_span_id == own.span_id
    assert tool.attributes["gen_ai.tool.name"] == "add"
    assert tool.attributes["gen_ai.tool.call.id"]
    turns = [s for s in spans if s.name == "job agent-test"]
    assert len(turns) == run.turns == 2
    assert all(s.parent_span_id == own.span_id for s in turns)
    chats = [s for s in spans if s.name == "chat claude-sonnet-4-6"]
    assert {s.parent_span_id for s in chats} == {s.span_id for s in turns}
    _no_prompt_anywhere(spans, "Please help")


def test_prompts_and_outputs_go_into_spans_only_when_asked(
    alice_client: Any,
    traced_here: OtlpReceiver,
    fake_provider: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.conftest import Workers

    workers = Workers()
    hidden = submit(alice_client, messages=[{"role": "user", "content": PROMPT}])
    workers.drain()
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    shown = submit(alice_client, messages=[{"role": "user", "content": PROMPT}])
    workers.drain()
    spans = traced_here.wait_for(
        lambda spans: sum(s.name == "chat claude-sonnet-4-6" for s in spans) == 2,
        timeout=30,
        what="both jobs' chat spans",
    )
    by_job = {s.attributes["llmops.job.id"]: s for s in spans if s.name.startswith("chat ")}
    assert "gen_ai.input.messages" not in by_job[str(hidden.id)].attributes
    _no_prompt_anywhere([by_job[str(hidden.id)]], "zebra-4471")
    captured = by_job[str(shown.id)].attributes
    assert "zebra-4471" in captured["gen_ai.input.messages"]
    shown.refresh_from_db()
    assert shown.output_text and shown.output_text in captured["gen_ai.output.messages"]


def test_a_collector_that_hangs_never_holds_the_job_path_and_its_losses_are_counted(
    alice_client: Any,
    fake_provider: FakeProvider,
    processes: Processes,  # noqa: F811
    metrics_settings: Any,  # noqa: F811
) -> None:
    from django_rq import get_connection

    with OtlpReceiver(frozen=True) as collector:
        env = worker_env(
            fake_provider,
            LLM_RATE_LIMIT_ENABLED="False",
            LLM_BREAKER_ENABLED="False",
            # Each export waits 30 s for an answer that never comes.
            OTEL_EXPORTER_OTLP_TIMEOUT="30",
            OTEL_BSP_MAX_QUEUE_SIZE="8",
            OTEL_BSP_MAX_EXPORT_BATCH_SIZE="2",
            **_otel_env(collector),
        )
        processes.start(env, "rqworker", LLM_QUEUE, "--with-scheduler")
        started = time.monotonic()
        jobs = [submit(alice_client) for _ in range(20)]
        wait_for(
            lambda: LlmJob.objects.filter(status="completed").count() == 20,
            timeout=60,
            what="every job completed",
        )
        took = time.monotonic() - started
        # Twenty jobs, each exporting its spans, while the first export still waits for its
        # 30 s: the job path never waited on the collector.
        assert took < 30, took
        assert collector.requests >= 1
        wait_for(
            lambda: int(get_connection(LLM_QUEUE).hget(SPAN_COUNTS_KEY, "dropped") or 0) > 0,
            timeout=30,
            what="the spans a full queue dropped to be counted",
        )
    line = next(
        line
        for line in scrape().splitlines()
        if line.startswith('llm_trace_spans_total{outcome="dropped"}')
    )
    assert float(line.split()[-1]) > 0
    assert len(jobs) == 20
