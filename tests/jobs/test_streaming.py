"""Every call streams (issue 21): a long generation in one call, a stall caught by the idle
bound, an error event mid-stream retried as a 529, a running job cancelled mid-stream, and the
live text over the WebSocket with a reconnect from an offset. Real workers, the real fake
provider (which bills what it streamed), the real ledger."""

import threading
import time
from decimal import Decimal
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async

from jobs.models import LlmJob
from keys.testing import api_key_for
from ledger.models import CostEntry
from ledger.services import job_upper_bound_cost
from llmops.queues import LLM_QUEUE
from tests.conftest import FakeProvider, submit
from tests.jobs.test_events import communicator
from tests.jobs.test_takeover import (  # noqa: F401  (fixtures)
    Processes,
    processes,
    wait_for,
    worker_env,
)


def billing(fake_provider: FakeProvider) -> list[dict[str, Any]]:
    return list(fake_provider.http.get("/_fake/billing").json()["calls"])


def long_reply(tokens: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"Write the report. fake_output_tokens={tokens}"}]


def entries(job: LlmJob) -> list[CostEntry]:
    return list(CostEntry.objects.filter(job=job).order_by("attempt", "entry_type"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_40000_token_generation_completes_in_one_call_and_the_ledger_equals_the_bill(
    alice_client, workers, fake_provider
):
    job = submit(
        alice_client, model="claude-sonnet-4-6", max_tokens=40_000, messages=long_reply(40_000)
    )
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed", job.error_message
    assert job.attempts == 1 and job.output_tokens == 40_000
    assert len(job.output_text or "") == 160_000  # the fake's four characters a token
    (call,) = billing(fake_provider)
    assert call["how"] == "answered" and call["output_tokens"] == 40_000
    (entry,) = entries(job)
    assert entry.outcome == "success" and not entry.is_estimated
    assert entry.cost_usd == Decimal(call["cost_usd"]) == job.cost_usd
    # The partial text kept while it ran is gone once it ended.
    from jobs.live_output import partial_text

    assert partial_text(job.id) is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_stall_mid_stream_is_abandoned_within_the_idle_bound_and_retried_once(
    alice_client, workers, fake_provider, settings
):
    settings.LLM_STREAM_IDLE_SECONDS = 1.5
    fake_provider.faults({"stall": 1.0})
    job = submit(alice_client, max_tokens=2000, messages=long_reply(2000))
    started = time.monotonic()
    workers.drain()
    elapsed = time.monotonic() - started
    job.refresh_from_db()
    # Two attempts (the first and its one retry), each abandoned 1.5 s after the last event.
    assert job.status == "failed" and job.error_code == "read_timeout"
    assert job.attempts == 2 and 3.0 <= elapsed < 10, elapsed
    assert "Stream stalled" in job.error_message and "outcome unknown" in job.error_message
    calls = billing(fake_provider)
    assert [c["how"] for c in calls] == ["stalled", "stalled"]
    rows = entries(job)
    assert [r.outcome for r in rows] == ["unknown_outcome", "unknown_outcome"]
    for row, call in zip(rows, calls, strict=True):
        # Booked from message_start's input and max_tokens of output: it covers the bill.
        assert row.is_estimated and row.input_tokens > 0 and row.output_tokens == 2000
        assert row.cost_usd >= Decimal(call["cost_usd"])


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_an_overloaded_error_event_mid_stream_is_retried_as_a_529(
    alice_client, workers, fake_provider
):
    job = submit(alice_client, max_tokens=2000, messages=long_reply(1000))
    fake_provider.http.post(
        "/_fake/faults", json={"next": ["overloaded_midstream", "ok"], "key": str(job.id)}
    ).raise_for_status()
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    first, second = entries(job)
    assert first.outcome == "error_response" and first.reason_code == "overloaded"
    assert first.http_status == 529 and first.retry_delay_seconds is not None
    calls = billing(fake_provider)
    assert [c["how"] for c in calls] == ["error_event", "answered"]
    # What streamed before the error was billed; the row bounds it from the bytes it read.
    assert first.is_estimated and first.cost_usd >= Decimal(calls[0]["cost_usd"]) > 0
    assert second.cost_usd == Decimal(calls[1]["cost_usd"])


@pytest.fixture
def slow_stream(fake_provider: FakeProvider) -> FakeProvider:
    # 20,000 tokens at 1,000 a second: a 20-second stream.
    fake_provider.http.post(
        "/_fake/faults", json={"stream_tokens_per_second": 1000}
    ).raise_for_status()
    return fake_provider


def _start_worker(processes: Processes, fake_provider: FakeProvider) -> None:  # noqa: F811
    env = worker_env(fake_provider, LLM_RATE_LIMIT_ENABLED="False", LLM_HEARTBEAT_SECONDS="1")
    processes.start(env, "rqworker", LLM_QUEUE, "--burst")


def _partial(client: Any, job: LlmJob) -> str:
    output = client.get(f"/api/v1/jobs/{job.id}/").json()["output"] or {}
    return str(output.get("partial_text") or "")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_cancel_of_a_running_stream_ends_it_within_two_seconds_booking_it_at_its_bound(
    alice_client,
    slow_stream,
    processes,  # noqa: F811
):
    job = submit(alice_client, max_tokens=20_000, messages=long_reply(20_000))
    _start_worker(processes, slow_stream)
    wait_for(
        lambda: len(_partial(alice_client, job)) > 2000,
        timeout=30,
        what=f"the stream to start\n{processes.logs()}",
    )
    asked = time.monotonic()
    response = alice_client.post(f"/api/v1/jobs/{job.id}/cancel/")
    took = time.monotonic() - asked
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "cancelled" and took < 2.5, took
    assert body["output"]["stop_reason"] == "cancelled" and body["output"]["text"]
    job.refresh_from_db()
    assert job.output_text == body["output"]["text"]
    wait_for(lambda: billing(slow_stream), timeout=10, what="the fake to bill the call")
    (call,) = billing(slow_stream)
    # The provider stopped when the stream closed: far from the 20,000 tokens asked for.
    assert call["how"] == "client_gone" and call["output_tokens"] < 10_000
    (row,) = entries(job)
    assert row.outcome == "cancelled" and row.is_estimated
    assert row.output_tokens >= call["output_tokens"] and row.input_tokens > 0
    assert Decimal(call["cost_usd"]) <= row.cost_usd == job.cost_usd
    # Booked with its reported input and max_tokens of output: the provider generated past
    # what the worker had read until it saw the close, and says nothing of it.
    assert row.output_tokens == job.max_tokens
    assert row.cost_usd <= job_upper_bound_cost(job=job)
    # A cancel of a job that ended: 409, nothing changes.
    again = alice_client.post(f"/api/v1/jobs/{job.id}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "not_cancellable"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_reconnect_with_an_offset_gets_every_character_exactly_once(
    alice,
    alice_client,
    slow_stream,
    processes,  # noqa: F811
):
    slow_stream.http.post(
        "/_fake/faults", json={"stream_tokens_per_second": 2000}
    ).raise_for_status()
    key = api_key_for(alice)
    job = submit(alice_client, max_tokens=8000, messages=long_reply(8000))
    received: list[dict[str, Any]] = []

    async def listen(offset: int, until_chars: int | None) -> None:
        """One socket from ``offset``: its deltas, until ``until_chars`` or the job's end."""
        comm = communicator(f"/ws/jobs/?job={job.id}&offset={offset}", key=key)
        connected, _ = await comm.connect()
        assert connected
        while True:
            event = await comm.receive_json_from(timeout=20)
            if event["type"] == "job.delta":
                received.append(event)
                end = event["offset"] + len(event["text"])
                if until_chars is not None and end >= until_chars:
                    break
            elif event["job"]["status"] in ("completed", "failed", "cancelled"):
                break
        await comm.disconnect()

    _start_worker(processes, slow_stream)
    wait_for(
        lambda: len(_partial(alice_client, job)) > 500,
        timeout=30,
        what=f"the stream to start\n{processes.logs()}",
    )
    # A first socket from 0 (it gets the text so far in one delta), dropped after 6,000
    # characters; a second one resumes from exactly there. Both in one event loop: the channel
    # layer's receive lock is bound to the loop that first used it, and a second loop's socket
    # heard nothing (the test waited 20 s for an event under load).
    marks: dict[str, int] = {}

    async def drop_then_resume() -> None:
        await listen(0, 6000)
        marks["have"] = received[-1]["offset"] + len(received[-1]["text"])
        marks["first"] = len(received)
        await listen(marks["have"], None)

    async_to_sync(drop_then_resume)()
    have, first = marks["have"], marks["first"]
    job.refresh_from_db()
    assert job.status == "completed"
    text = ""
    for event in received[:first]:
        assert event["offset"] == len(text), "a gap or a duplicate on the first socket"
        text += event["text"]
    text = text[:have]
    assert received[first]["offset"] == have and len(received[first]["text"]) > 0
    for event in received[first:]:
        assert event["offset"] == len(text), "a gap or a duplicate after the reconnect"
        text += event["text"]
    assert text == job.output_text
    # Coalesced: far fewer events than the stream's deltas (one per 64 characters).
    assert len(received) < len(text) / 64 / 3


@pytest.mark.django_db
def test_a_running_job_shows_its_partial_text_and_a_finished_one_none(
    alice_client, workers, fake_provider
):
    job = submit(alice_client)
    body = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
    assert body["status"] == "queued" and body["output"] is None
    LlmJob.objects.filter(id=job.id).update(status="running", attempts=1)
    body = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
    assert body["output"] == {
        "text": None,
        "stop_reason": None,
        "content": [],
        "partial_text": "",
    }
    listed = alice_client.get("/api/v1/jobs/").json()["results"][0]
    assert listed["output"] is None  # the list never reads Redis


def test_the_worker_stops_reading_when_cancelled_from_another_thread(fake_provider, settings):
    """The provider boundary alone: a cancel from another thread ends a stream that is waiting
    on its socket (a slow provider), within a moment, as ``cancelled`` with what streamed and
    no output bound (the ledger books it up to max_tokens)."""
    from providers.base import ProviderRequest
    from providers.call_deadline import CallDeadline
    from providers.registry import get_provider

    fake_provider.http.post(
        "/_fake/faults", json={"stream_tokens_per_second": 200}
    ).raise_for_status()
    pieces: list[str] = []
    deadline = CallDeadline(60)
    request = ProviderRequest(
        body={"model": "claude-haiku-4-5", "max_tokens": 5000, "messages": long_reply(5000)},
        idempotency_key="cancel-test",
        read_timeout=30,
        deadline=deadline,
        on_text=pieces.append,
    )
    get_provider().warm_up()  # as the runner does before it starts a deadline
    threading.Timer(1.5, deadline.cancel).start()
    started = time.monotonic()
    outcome = get_provider().call(request)
    assert outcome.kind == "cancelled" and time.monotonic() - started < 3
    assert outcome.text == "".join(pieces) and outcome.text
    assert outcome.usage["input_tokens"] > 0 and outcome.maybe_billed
    assert outcome.output_tokens_bound is None
    with httpx.Client(base_url=fake_provider.url) as client:
        wait_for(lambda: client.get("/_fake/billing").json()["calls"], timeout=5, what="the bill")


@pytest.mark.django_db
def test_staff_cancel_jobs_from_the_admin_a_running_ones_stream_too(alice_client, client):
    from django.contrib.auth.models import User

    waiting, running, done = (submit(alice_client) for _ in range(3))
    LlmJob.objects.filter(id=running.id).update(status="running", attempts=1)
    LlmJob.objects.filter(id=done.id).update(status="completed")
    staff = User.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(staff)
    response = client.post(
        "/admin/jobs/llmjob/",
        {"action": "cancel_jobs", "_selected_action": [waiting.id, running.id, done.id]},
        follow=True,
    )
    assert response.status_code == 200
    text = response.content.decode()
    assert "1 cancelled; 1 running: their workers close the streams" in text
    assert "1 already finished" in text
    statuses = dict(LlmJob.objects.values_list("id", "status"))
    assert statuses[waiting.id] == "cancelled" and statuses[done.id] == "completed"
    assert LlmJob.objects.get(id=running.id).cancel_requested_at is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_stream_far_longer_than_the_stale_threshold_is_never_taken_over(
    alice_client,
    slow_stream,
    processes,  # noqa: F811
    settings,
):
    """The heartbeat keeps a stream of any length its own: with a 2 s stale threshold, a 10 s
    generation sees the reconciler pass every half second and runs once, paid once."""
    from jobs.reconciler import reconcile_jobs

    settings.LLM_STALE_AFTER_SECONDS = 2
    slow_stream.http.post(
        "/_fake/faults", json={"stream_tokens_per_second": 1000}
    ).raise_for_status()
    job = submit(alice_client, max_tokens=10_000, messages=long_reply(10_000))
    _start_worker(processes, slow_stream)
    wait_for(
        lambda: LlmJob.objects.get(id=job.id).status == "running",
        timeout=30,
        what=f"the stream to start\n{processes.logs()}",
    )
    passes = []
    while LlmJob.objects.get(id=job.id).status == "running":
        passes.append(reconcile_jobs().recovered_stale)
        time.sleep(0.5)
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    assert len(passes) >= 12 and set(passes) == {0}, passes
    (call,) = billing(slow_stream)
    assert call["how"] == "answered" and call["output_tokens"] == 10_000
    assert [r.outcome for r in entries(job)] == ["success"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_socket_resuming_after_the_job_ended_gets_the_rest_of_its_text_and_its_end(
    alice, alice_client, workers
):
    """The job ends between two sockets (a client that reconnects a moment too late): the new
    one gets the text from its offset and the job's final state, which was published before it
    joined and would otherwise never come."""
    job = submit(alice_client)
    workers.drain()
    job.refresh_from_db()
    assert job.status == "completed" and len(job.output_text) > 5
    events: list[dict[str, Any]] = []
    key = api_key_for(alice)

    async def listen() -> None:
        comm = communicator(f"/ws/jobs/?job={job.id}&offset=5", key=key)
        connected, _ = await comm.connect()
        assert connected
        events.append(await comm.receive_json_from(timeout=5))
        events.append(await comm.receive_json_from(timeout=5))
        await comm.disconnect()

    async_to_sync(listen)()
    delta, update = events
    assert (delta["type"], delta["offset"], delta["text"]) == (
        "job.delta",
        5,
        job.output_text[5:],
    )
    assert update["type"] == "job.updated" and update["job"]["status"] == "completed"
    assert update["job"]["output"]["text"] == job.output_text


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
@pytest.mark.parametrize("ends", ["after the socket joined", "after its text was read"])
def test_a_resume_at_the_moment_the_job_ends_hears_its_text_then_its_end_once(
    alice, alice_client, monkeypatch, ends
):
    """A client reconnects (another web host, tests/ops/test_web_failover.py) just as its job
    ends: the job's last delta and its end are published after the socket joined, so they reach
    it live, and the resume read the job once it had ended (or read the running text just
    before). The faults: the end came twice (the resume's copy and the live one), or before
    the rest of the text (the resume read the running text, then the end)."""
    from jobs import consumers
    from jobs.channel_layer import RedisChannelLayer
    from jobs.events import publish_event, publish_job_event
    from jobs.live_output import LiveOutput, partial_text_clear
    from llmops.queues import all_jobs_group, job_events_group, job_group

    job = submit(alice_client)
    LlmJob.objects.filter(id=job.id).update(status="running", attempts=1)
    head, rest = "The first part, ", "and the rest of the text."
    output = LiveOutput(job_id=job.id, user_id=alice.id, attempt=1)
    output(head)
    output.close()
    ended = threading.Event()

    def end_the_job() -> None:
        """As the worker ends it: the last delta, the row, the partial text cleared, the end."""
        if ended.is_set():
            return
        ended.set()
        groups = [job_events_group(alice.id), job_group(job.id), all_jobs_group()]
        delta = {"type": "job.delta", "job": str(job.id), "attempt": 1, "offset": len(head)}
        publish_event(groups, {**delta, "text": rest}, about="the last delta")
        LlmJob.objects.filter(id=job.id).update(status="completed", output_text=head + rest)
        partial_text_clear(job.id)
        job.refresh_from_db()
        assert publish_job_event(job)

    if ends == "after the socket joined":
        group_add = RedisChannelLayer.group_add

        async def joined_then_ended(self: Any, group: str, channel: str) -> None:
            await group_add(self, group, channel)
            if group == job_group(job.id):
                await sync_to_async(end_the_job)()

        monkeypatch.setattr(RedisChannelLayer, "group_add", joined_then_ended)
    else:
        read = consumers.partial_text

        def read_then_ended(job_id: Any) -> Any:
            kept = read(job_id)
            end_the_job()
            return kept

        monkeypatch.setattr(consumers, "partial_text", read_then_ended)

    key = api_key_for(alice)
    events: list[dict[str, Any]] = []

    async def resume() -> None:
        comm = communicator(f"/ws/jobs/?job={job.id}&offset=4", key=key)
        connected, _ = await comm.connect()
        assert connected
        while not events or events[-1]["type"] != "job.updated":
            events.append(await comm.receive_json_from(timeout=5))
        if not await comm.receive_nothing(timeout=1):
            events.append(await comm.receive_json_from())
        await comm.disconnect()

    async_to_sync(resume)()
    assert ended.is_set()
    text = head[:4]
    for event in events[:-1]:
        assert event["type"] == "job.delta" and event["offset"] == len(text), events
        text += event["text"]
    assert text == head + rest, events
    assert events[-1]["type"] == "job.updated" and events[-1]["job"]["status"] == "completed"
