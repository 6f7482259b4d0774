"""Where a trace comes from: the W3C ``traceparent`` of the submit (the job API, a batch's items,
the front doors), a new trace when there is none or it is not valid, the ids the rows keep, the
log lines of the request, and the admin timeline read from the rows."""

import io
import json
import logging
from typing import Any

import pytest

from batches.models import Batch
from jobs.models import JobWait, LlmJob
from jobs.services.holds import job_hold
from tests.batches.helpers import batch_body, item
from tests.conftest import Workers, submit
from tracing.context import child_span_id, parse_traceparent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@pytest.mark.parametrize(
    ("header", "valid"),
    [
        (TRACEPARENT, True),
        (f"00-{CALLER_TRACE}-{CALLER_SPAN}-00", True),  # not sampled: still a parent
        (f"01-{CALLER_TRACE}-{CALLER_SPAN}-01-future", True),  # a later version's extra field
        (f"00-{CALLER_TRACE}-{CALLER_SPAN}-01-extra", False),
        (f"ff-{CALLER_TRACE}-{CALLER_SPAN}-01", False),
        (f"00-{'0' * 32}-{CALLER_SPAN}-01", False),
        (f"00-{CALLER_TRACE}-{'0' * 16}-01", False),
        (f"00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-01", False),
        ("00-abc-def-01", False),
        ("", False),
    ],
)
def test_a_traceparent_is_read_as_the_w3c_specification_says(header: str, valid: bool) -> None:
    parsed = parse_traceparent(header)
    assert (parsed is not None) == valid
    if parsed is not None:
        assert (parsed.trace_id, parsed.span_id) == (CALLER_TRACE, CALLER_SPAN)
        assert parsed.sampled == header.endswith("01") or "-01-" in header


def test_a_job_submitted_with_a_traceparent_continues_the_callers_trace(alice_client) -> None:
    response = alice_client.post(
        "/api/v1/jobs/",
        {"feature": "f", "model": "claude-sonnet-4-6", "max_tokens": 16, "messages": [
            {"role": "user", "content": "hi"}]},
        format="json",
        HTTP_TRACEPARENT=TRACEPARENT,
    )  # fmt: skip
    assert response.status_code == 202, response.content
    job = LlmJob.objects.get(id=response.json()["id"])
    own = parse_traceparent(job.traceparent)
    assert own is not None and own.trace_id == CALLER_TRACE and own.span_id != CALLER_SPAN
    assert job.trace_parent_span_id == CALLER_SPAN


@pytest.mark.parametrize("header", [None, "00-not-a-valid-header-01"])
def test_a_job_without_a_valid_traceparent_starts_a_trace_of_its_own(
    alice_client, header: str | None
) -> None:
    extra = {"HTTP_TRACEPARENT": header} if header else {}
    first = submit(alice_client)
    response = alice_client.post(
        "/api/v1/jobs/",
        {"feature": "f", "model": "claude-sonnet-4-6", "max_tokens": 16, "messages": [
            {"role": "user", "content": "hi"}]},
        format="json",
        **extra,
    )  # fmt: skip
    assert response.status_code == 202, response.content
    second = LlmJob.objects.get(id=response.json()["id"])
    for job in (first, second):
        own = parse_traceparent(job.traceparent)
        assert own is not None and own.sampled and job.trace_parent_span_id == ""
    assert first.traceparent[3:35] != second.traceparent[3:35]


def test_a_batchs_items_continue_the_trace_of_its_submit(alice_client) -> None:
    response = alice_client.post(
        "/api/v1/batches/",
        batch_body([item(), item("Summarise: the parcel is lost")]),
        format="json",
        HTTP_TRACEPARENT=TRACEPARENT,
    )
    assert response.status_code == 202, response.content
    jobs = LlmJob.objects.filter(batch_items__batch=Batch.objects.get(id=response.json()["id"]))
    assert jobs.count() == 2
    spans = set()
    for job in jobs:
        own = parse_traceparent(job.traceparent)
        assert own is not None and own.trace_id == CALLER_TRACE
        assert job.trace_parent_span_id == CALLER_SPAN
        spans.add(own.span_id)
    assert len(spans) == 2


def test_the_requests_log_lines_carry_the_callers_trace_and_span(
    alice_client, caplog: pytest.LogCaptureFixture
) -> None:
    from llmops.logs import JsonFormatter

    # Formatted as it is written, in the request's context (as the processes' handlers do).
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(JsonFormatter())
    access = logging.getLogger("llmops.access")
    access.addHandler(handler)
    try:
        with caplog.at_level(logging.INFO, logger="llmops.access"):
            alice_client.get("/api/v1/jobs/", HTTP_TRACEPARENT=TRACEPARENT)
    finally:
        access.removeHandler(handler)
    (line,) = [json.loads(text) for text in written.getvalue().splitlines()]
    assert (line["trace_id"], line["span_id"]) == (CALLER_TRACE, CALLER_SPAN)
    assert line["request_id"]


@pytest.mark.django_db(transaction=True)
def test_the_admin_shows_a_jobs_timeline_from_its_rows(
    alice_client, admin_client: Any, fake_provider, settings
) -> None:
    settings.LLM_TRACE_URL_TEMPLATE = "https://tempo.example/trace/{trace_id}"
    fake_provider.http.post("/_fake/faults", json={"next": ["529", "ok"]})
    job = submit(alice_client)
    job_hold(job_id=job.id, rq_job_id=None, delay_seconds=0.001, reason="rate limit", limiter=True)
    Workers().drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    assert JobWait.objects.filter(job=job, kind="rate_limit").count() == 1
    page = admin_client.get(f"/admin/jobs/llmjob/{job.id}/change/").content.decode()
    own = parse_traceparent(job.traceparent)
    assert own is not None
    assert f'href="https://tempo.example/trace/{own.trace_id}"' in page
    assert "job email-classify" in page
    assert page.count("chat claude-sonnet-4-6") == 2
    assert "error.type=overloaded" in page
    assert "wait retry" in page and "wait rate_limit" in page
    assert child_span_id(own.span_id, "attempt", 2) in page


def test_a_protocol_the_exporter_does_not_serve_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tracing.checks import otel_protocol_check
    from tracing.setup import tracing_wanted

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    (error,) = otel_protocol_check()
    assert error.id == "tracing.E001" and "'grpc'" in error.msg
    assert not tracing_wanted()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    assert otel_protocol_check() == [] and tracing_wanted()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not tracing_wanted()


@pytest.mark.django_db(transaction=True)
def test_a_front_door_batchs_requests_continue_the_trace_of_its_create() -> None:
    from django.test import Client

    from keys.testing import api_key_for
    from tests.conftest import make_user

    secret = api_key_for(make_user("dora"))
    response = Client().post(
        "/anthropic/v1/messages/batches",
        {
            "requests": [
                {
                    "custom_id": "one",
                    "params": {
                        "model": "claude-haiku-4-5",
                        "max_tokens": 64,
                        "messages": [{"role": "user", "content": "Summarise the outage"}],
                    },
                }
            ]
        },
        content_type="application/json",
        HTTP_X_API_KEY=secret,
        HTTP_TRACEPARENT=TRACEPARENT,
    )
    assert response.status_code == 200, response.content
    (job,) = LlmJob.objects.filter(trace_parent_span_id=CALLER_SPAN)
    own = parse_traceparent(job.traceparent)
    assert own is not None and own.trace_id == CALLER_TRACE
