"""Message Batches at /anthropic/v1/messages/batches, driven with the official ``anthropic`` SDK's
``client.messages.batches`` unchanged against the real stack (tests/gateway/conftest.py) plus
the deferred loop (``manage.py deferred_batches --loop``, short timings) and a default worker
(a cancel's background job): each request is a deferred job sent in the fake provider's own
Message Batches, its money checked against the fake's billing log."""

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import anthropic
import pytest

from batches.models import Batch, BatchItem
from deferred.models import ProviderBatchItem
from jobs.models import LlmJob
from jobs.timeouts import job_timeout_for
from keys.testing import api_key_for
from ledger.models import CostEntry
from ledger.pricing import attempt_cost
from ledger.selectors import price_for_model
from tests.conftest import make_user
from tests.gateway.conftest import Stack, billed_usd, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "claude-haiku-4-5"


@dataclass
class BatchStack:
    stack: Stack
    client: anthropic.Anthropic

    def faults(self, **batch: Any) -> None:
        self.stack.fake.http.post("/_fake/faults", json={"faults": {}, **batch}).raise_for_status()

    def ended(self, batch_id: str, timeout: float = 60) -> Any:
        def ended() -> Any:
            batch = self.client.messages.batches.retrieve(batch_id)
            return batch if batch.processing_status == "ended" else None

        return wait_for(ended, timeout=timeout, what=f"batch {batch_id} to end", every=0.3)


@pytest.fixture
def batches(stack: Stack) -> Iterator[BatchStack]:
    """The stack with the deferred loop at short timings and a default worker
    (tests/gateway/conftest.py, ``_SharedProcesses.ensure_batches``)."""
    stack.with_batches()
    yield BatchStack(stack, stack.anthropic())


def _request(custom_id: str, text: str, **params: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "params": {
            "model": MODEL,
            "max_tokens": 200,
            "messages": [{"role": "user", "content": text}],
            **params,
        },
    }


def _jobs_by_custom_id(batch_id: str) -> dict[str, LlmJob]:
    batch = Batch.objects.get(id=batch_id.removeprefix("msgbatch_"))
    items = BatchItem.objects.filter(batch=batch).select_related("job")
    return {item.metadata["custom_id"]: item.job for item in items}


def _batch_billed(stack: Stack, job_id: Any) -> Decimal:
    """What the fake provider billed for a job's item in its Message Batches (custom_id is the
    job id), each to the micro-dollar as the ledger books it."""
    calls = stack.fake.http.get("/_fake/billing").json()["calls"]
    return sum(
        (
            Decimal(call["cost_usd"]).quantize(Decimal("1e-6"), rounding=ROUND_HALF_UP)
            for call in calls
            if call["how"] == "batch" and call.get("custom_id") == str(job_id)
        ),
        Decimal(0),
    )


def test_it_runs_a_batch_at_half_price_and_gives_each_result_by_custom_id(
    batches: BatchStack,
) -> None:
    batches.faults(batch_processing_seconds=1)
    client = batches.client
    created = client.messages.batches.create(
        requests=[_request(f"ticket-{i}", f"Summarise ticket {i}") for i in range(3)],
        extra_headers={"LLM-Feature": "nightly-summary", "LLM-Tags": "door,batch"},
    )
    assert created.id.startswith("msgbatch_") and created.type == "message_batch"
    assert created.processing_status == "in_progress" and created.results_url is None
    assert created.request_counts.processing == 3
    assert (created.expires_at - created.created_at).total_seconds() == pytest.approx(86_400, abs=5)

    ended = batches.ended(created.id)
    counts = ended.request_counts
    assert (counts.succeeded, counts.processing, counts.errored, counts.canceled) == (3, 0, 0, 0)
    assert ended.ended_at is not None and ended.results_url.endswith(f"{created.id}/results")

    jobs = _jobs_by_custom_id(created.id)
    results = {
        result.custom_id: result.result for result in client.messages.batches.results(created.id)
    }
    assert set(results) == set(jobs) == {"ticket-0", "ticket-1", "ticket-2"}
    price = price_for_model(model=MODEL)
    for custom_id, result in results.items():
        job = jobs[custom_id]
        job.refresh_from_db()
        assert (job.mode, job.status, job.feature) == ("deferred", "completed", "nightly-summary")
        assert result.type == "succeeded"
        assert result.message.content[0].text == job.output_text
        assert result.message.usage.output_tokens == job.output_tokens > 0
        # Half price, as the provider billed it for the item of its own batch.
        (entry,) = CostEntry.objects.filter(job=job)
        assert entry.is_batch and entry.outcome == "success"
        usage = {"input_tokens": job.input_tokens, "output_tokens": job.output_tokens}
        assert job.cost_usd == entry.cost_usd == _batch_billed(batches.stack, job.id) > 0
        assert job.cost_usd == attempt_cost(price, usage, batch=True)
        assert job.cost_usd * 2 == pytest.approx(attempt_cost(price, usage), abs=Decimal("2e-6"))
    assert batches.stack.fake.stats()["requests"] == 0  # not one real-time call

    # The list pages as the SDK pages; an ended batch can be deleted (its jobs stay).
    listed = client.messages.batches.list(limit=1)
    assert [batch.id for batch in listed] == [created.id]
    deleted = client.messages.batches.delete(created.id)
    assert (deleted.id, deleted.type) == (created.id, "message_batch_deleted")
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(created.id)
    assert LlmJob.objects.filter(status="completed").count() == 3


def test_it_lists_batches_newest_first_page_by_page(batches: BatchStack) -> None:
    batches.faults(batch_processing_seconds=60)
    ids = [
        batches.client.messages.batches.create(requests=[_request("one", f"Ask {i}")]).id
        for i in range(3)
    ]
    listed = batches.client.messages.batches.list(limit=2)
    assert [batch.id for batch in listed.data] == ids[::-1][:2] and listed.has_more
    assert [batch.id for batch in listed] == ids[::-1]  # the SDK fetched the next page
    newer = batches.client.messages.batches.list(before_id=ids[0], limit=1)
    assert [batch.id for batch in newer.data] == [ids[1]] and newer.has_more


def test_a_cancel_ends_the_batch_with_its_requests_canceled_and_nothing_billed(
    batches: BatchStack,
) -> None:
    batches.faults(batch_processing_seconds=60)
    created = batches.client.messages.batches.create(
        requests=[_request(f"r{i}", f"Translate line {i}") for i in range(2)]
    )
    jobs = _jobs_by_custom_id(created.id)
    # Both wait in the provider's batch before the cancel.
    wait_for(
        lambda: LlmJob.objects.filter(
            id__in=[job.id for job in jobs.values()], provider_batch__isnull=False
        ).count()
        == 2,
        timeout=30,
        what="the jobs to be sent in a provider batch",
    )
    cancelled = batches.client.messages.batches.cancel(created.id)
    assert cancelled.processing_status in ("canceling", "ended")
    assert cancelled.cancel_initiated_at is not None
    ended = batches.ended(created.id)
    assert (ended.request_counts.canceled, ended.request_counts.succeeded) == (2, 0)
    results = list(batches.client.messages.batches.results(created.id))
    assert sorted(r.custom_id for r in results) == ["r0", "r1"]
    assert {r.result.type for r in results} == {"canceled"}
    # The provider's batch is cancelled too (nobody waits for it); its items are booked at $0.
    wait_for(
        lambda: ProviderBatchItem.objects.filter(booked_at__isnull=False).count() == 2,
        timeout=30,
        what="the provider batch's items to be booked",
    )
    rows = CostEntry.objects.filter(job__in=jobs.values())
    assert {row.cost_usd for row in rows} == {Decimal(0)}
    assert Decimal(batches.stack.fake.stats()["billed"]["cost_usd"]) == 0


def test_a_request_whose_job_fails_after_its_retries_is_errored_with_the_providers_error(
    batches: BatchStack,
) -> None:
    # Every item of every provider batch errors (api_error or overloaded_error): the job tries
    # again in later provider batches until its error class's retries are spent.
    batches.faults(batch_processing_seconds=0.2, batch_errored_rate=1.0)
    created = batches.client.messages.batches.create(requests=[_request("doomed", "Hello")])
    ended = batches.ended(created.id)
    assert (ended.request_counts.errored, ended.request_counts.succeeded) == (1, 0)
    (line,) = batches.client.messages.batches.results(created.id)
    (job,) = _jobs_by_custom_id(created.id).values()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts > 1
    assert line.custom_id == "doomed" and line.result.type == "errored"
    error = line.result.error
    assert error.type == "error" and error.error.type in ("api_error", "overloaded_error")
    assert str(job.id) in error.error.message
    rows = CostEntry.objects.filter(job=job)
    assert rows.count() == job.attempts and {row.cost_usd for row in rows} == {Decimal(0)}
    assert Decimal(batches.stack.fake.stats()["billed"]["cost_usd"]) == 0


def test_a_bad_request_refuses_the_whole_batch_naming_it(batches: BatchStack) -> None:
    client = batches.client
    bad_model = [_request("good", "Hello"), _request("bad", "Hello", model="claude-nope-9")]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.batches.create(requests=bad_model)
    message = refused.value.body["error"]["message"]
    assert "requests.1.params.model" in message and "'bad'" in message
    with pytest.raises(anthropic.BadRequestError) as duplicate:
        client.messages.batches.create(requests=[_request("same", "a"), _request("same", "b")])
    assert "not unique" in duplicate.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.create(requests=[])
    assert not Batch.objects.exists() and not LlmJob.objects.exists()


def test_one_idempotency_key_is_one_batch_and_another_users_batch_is_not_found(
    batches: BatchStack,
) -> None:
    batches.faults(batch_processing_seconds=60)
    key = {"Idempotency-Key": "nightly-2026-12-06"}
    create = batches.client.messages.batches.create
    created = create(requests=[_request("mine", "Hello")], extra_headers=key)
    # The same key again is the same batch; with another body, a conflict.
    assert create(requests=[_request("mine", "Hello")], extra_headers=key).id == created.id
    with pytest.raises(anthropic.ConflictError):
        create(requests=[_request("mine", "Bye")], extra_headers=key)
    assert Batch.objects.count() == 1 and LlmJob.objects.count() == 1
    bob = batches.stack.anthropic(api_key=api_key_for(make_user("bob")))
    for call in (
        bob.messages.batches.retrieve,
        bob.messages.batches.cancel,
        bob.messages.batches.delete,
    ):
        with pytest.raises(anthropic.NotFoundError):
            call(created.id)
    assert list(bob.messages.batches.list()) == []
    assert batches.client.messages.batches.retrieve(created.id).processing_status == "in_progress"


def test_a_request_the_provider_batch_does_not_finish_before_the_deadline_runs_in_real_time(
    batches: BatchStack,
) -> None:
    batches.faults(batch_processing_seconds=120)
    # The deferred loop sends the request in a provider batch while its deadline is a real-time
    # run's bound (jobs/timeouts.py) and a few seconds away; the batch is still running when
    # only the bound is left, so the request runs in real time then.
    deadline = job_timeout_for(200) + 6
    created = batches.client.messages.batches.create(
        requests=[_request("urgent", "Summarise the outage report")],
        extra_headers={"LLM-Deadline-Seconds": str(deadline)},
    )
    (job,) = _jobs_by_custom_id(created.id).values()
    ended = batches.ended(created.id, timeout=60)
    assert ended.request_counts.succeeded == 1
    (result,) = batches.client.messages.batches.results(created.id)
    job.refresh_from_db()
    assert (job.status, job.mode) == ("completed", "realtime")
    assert job.completed_at <= job.deadline
    assert result.result.type == "succeeded"
    assert result.result.message.content[0].text == job.output_text
    # It was in a provider batch first, then called in real time at the standard price.
    assert ProviderBatchItem.objects.filter(job=job, moved_to_real_time=True).exists()
    success = CostEntry.objects.get(job=job, outcome="success")
    assert not success.is_batch and success.cost_usd == billed_usd(batches.stack.fake, job.id) > 0
    # The provider batch nobody waits for any more is cancelled: its item is booked at $0.
    wait_for(
        lambda: CostEntry.objects.filter(job=job, is_superseded=True).exists(),
        timeout=30,
        what="the cancelled provider batch's item to be booked",
    )
    job.refresh_from_db()
    total = sum(CostEntry.objects.filter(job=job).values_list("cost_usd", flat=True), Decimal(0))
    assert job.cost_usd == total == billed_usd(batches.stack.fake, job.id)
