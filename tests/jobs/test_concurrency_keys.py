"""concurrency_key: at most LLM_CONCURRENCY_PER_KEY jobs with one key run at once, on every
worker; a job waiting on its key uses no attempt; a dead worker's slot frees itself."""

import time

import pytest

from jobs.concurrency_keys import slot_acquire, slot_extend, slot_release
from jobs.models import LlmJob
from ledger.models import CostEntry
from tests.conftest import FakeProvider, job_body, submit
from tests.jobs.test_takeover import (
    Processes,
    processes,  # noqa: F401  (fixture)
    wait_for,
    worker_env,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.mark.parametrize("value", ["", "   ", 42, ["a"], "x" * 201, "line\nbreak", "tab\there"])
def test_a_bad_concurrency_key_is_refused(alice_client, value):
    response = alice_client.post("/api/v1/jobs/", job_body(concurrency_key=value), format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_concurrency_key"
    assert response.json()["detail"] == {"field": "concurrency_key"}
    assert not LlmJob.objects.exists()


def test_the_key_is_kept_and_shown(alice_client):
    job = submit(alice_client, concurrency_key="invoice-8812")
    assert job.concurrency_key == "invoice-8812"
    body = alice_client.get(f"/api/v1/jobs/{job.id}/").json()
    assert body["concurrency_key"] == "invoice-8812"
    assert (
        alice_client.get(f"/api/v1/jobs/{submit(alice_client).id}/").json()["concurrency_key"] == ""
    )


def test_slots_are_counted_per_key_and_a_lost_holders_slot_frees_itself(settings):
    settings.LLM_CONCURRENCY_PER_KEY = 2
    settings.LLM_HEARTBEAT_SECONDS = 0.25  # leases of 2 s (the floor)
    assert slot_acquire(concurrency_key="doc", job_id="a")
    assert slot_acquire(concurrency_key="doc", job_id="b")
    assert not slot_acquire(concurrency_key="doc", job_id="c")
    assert slot_acquire(concurrency_key="other-doc", job_id="c")
    assert slot_acquire(concurrency_key="doc", job_id="a"), "a holder renews its own slot"
    slot_release(concurrency_key="doc", job_id="b")
    assert slot_acquire(concurrency_key="doc", job_id="c")
    # "a" stops beating (its worker was killed): after its lease, its slot is free again.
    for _ in range(5):
        time.sleep(0.5)
        assert slot_extend(concurrency_key="doc", job_id="c")
    assert slot_acquire(concurrency_key="doc", job_id="d")
    assert not slot_extend(concurrency_key="doc", job_id="a"), "a lost slot is not taken back"


def _intervals(jobs: list[LlmJob]) -> list[tuple[float, float]]:
    spans = []
    for job in jobs:
        job.refresh_from_db()
        assert job.started_at and job.completed_at
        spans.append((job.started_at.timestamp(), job.completed_at.timestamp()))
    return sorted(spans)


def test_jobs_with_one_key_never_overlap_across_real_workers_and_wait_without_attempts(
    alice_client, fake_provider: FakeProvider, processes: Processes,  # noqa: F811
):  # fmt: skip
    fake_provider.faults({}, latency_ms=800)
    env = worker_env(fake_provider, LLM_CONCURRENCY_KEY_WAIT_SECONDS="0.2")
    same = [submit(alice_client, concurrency_key="doc-1") for _ in range(3)]
    other = [submit(alice_client, concurrency_key="doc-2") for _ in range(2)]
    for _ in range(3):
        processes.start(env, "rqworker", "llm", "--with-scheduler")
    try:
        wait_for(
            lambda: LlmJob.objects.filter(status="completed").count() == 5,
            timeout=90,
            what="five completed jobs",
            every=0.2,
        )
    except AssertionError:
        raise AssertionError(processes.logs()) from None

    spans = _intervals(same)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end - 0.05, f"two doc-1 jobs ran at once: {spans}"
    # The other key was not held up by the first: some doc-2 job ran beside a doc-1 job.
    assert any(s2 < e1 and s1 < e2 for s1, e1 in _intervals(same) for s2, e2 in _intervals(other))
    # Waiting on the key used no attempt: one attempt and one ledger row per job.
    for job in [*same, *other]:
        job.refresh_from_db()
        assert job.attempts == 1
        assert CostEntry.objects.filter(job=job).count() == 1
    assert "held for" in processes.output()
