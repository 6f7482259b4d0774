"""The gate in the runner: a short wait for a slot happens in the worker, a longer one puts the
job back on the queue (job_hold) with no attempt used and no call made; a budget refusal gives
the slot back. Against the real Redis, MariaDB, an RQ worker and the fake provider."""

import threading
import time

import django_rq
import pytest
from django.db import connection
from django.utils import timezone

from jobs.models import LlmJob
from ledger.models import Budget, CostEntry
from llmops.queues import LLM_QUEUE
from ratelimits.limiter import limiter_settle
from tests.conftest import submit
from tests.ratelimits.conftest import reserve

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.fixture
def two_per_window(settings):
    settings.LLM_RATE_LIMITS = {"claude-sonnet-4-6": {"rpm": 2}}


def test_a_short_wait_for_a_slot_happens_in_the_worker(
    alice_client, workers, fake_provider, two_per_window
):
    reserve(rpm=2)
    reserve(rpm=2)  # two other calls fill the 2 s window...
    time.sleep(1.4)  # ...and leave it in 0.6 s
    job = submit(alice_client)
    first_rq_job = job.rq_job_id
    started = time.monotonic()
    workers.work_once()
    waited = time.monotonic() - started
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    assert job.rq_job_id == first_rq_job  # never went back on the queue
    assert 0.4 <= waited < 2.0
    assert not workers.scheduled()


def test_a_longer_wait_holds_the_job_with_no_attempt_used(
    alice_client, workers, fake_provider, two_per_window
):
    reserve(rpm=2)
    reserve(rpm=2)  # the window is full for 2 s: longer than a worker waits
    job = submit(alice_client)
    first_rq_job = job.rq_job_id
    started = time.monotonic()
    workers.work_once()
    assert time.monotonic() - started < 1.5
    job.refresh_from_db()
    assert (job.status, job.attempts, job.budget_attempts) == ("queued", 0, 0)
    assert job.rq_job_id != first_rq_job
    assert [j.id for j in workers.scheduled()] == [job.rq_job_id]
    assert not CostEntry.objects.filter(job=job).exists()
    assert fake_provider.stats()["requests"] == 0
    # Its slot comes: rq's scheduler puts it back, and it runs with its first attempt.
    time.sleep(2.0)
    workers.release_scheduled()
    workers.work_once()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    assert fake_provider.stats()["requests"] == 1


def test_a_held_retry_keeps_its_attempt_count(alice_client, workers, fake_provider, settings):
    settings.LLM_RATE_LIMITS = {"claude-sonnet-4-6": {"rpm": 1}}
    settings.LLM_RATE_LIMIT_WINDOW_SECONDS = 6.0  # the retry comes well within it, however slow
    fake_provider.faults({"500": 1.0}, for_seconds=0.5)
    job = submit(alice_client)
    workers.work_once()  # attempt 1 fails with a 500: a retry is scheduled
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("retrying", 1)
    time.sleep(0.5)
    workers.release_scheduled()
    workers.work_once()  # the retry finds the window full (1 call in 6 s): held
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("retrying", 1)
    assert CostEntry.objects.filter(job=job).count() == 1
    # The hold moved the row's next attempt to its paced slot: it runs then.
    time.sleep(max(0.0, (job.next_attempt_at - timezone.now()).total_seconds()) + 0.1)
    workers.release_scheduled()
    workers.work_once()
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("completed", 2)


def test_a_budget_refusal_gives_the_slot_back(alice_client, workers, fake_provider, two_per_window):
    jobs = [submit(alice_client), submit(alice_client)]
    # Set after the submits (a submit it cannot take is refused with 429): the worker refuses.
    Budget.objects.create(scope="feature", feature="email-classify", limit_usd="0.000001")
    workers.work_once()
    assert fake_provider.stats()["requests"] == 0
    assert {j.status for j in LlmJob.objects.filter(id__in=[j.id for j in jobs])} == {"failed"}
    # Both slots are free again: two other calls fit in this window.
    assert reserve(rpm=2)[0].admitted and reserve(rpm=2)[0].admitted


def test_a_job_of_a_priority_feature_goes_to_the_front_of_the_queue(alice_client, settings):
    settings.LLM_PRIORITY_FEATURES = frozenset({"email-classify"})
    batch = [submit(alice_client, feature="summarize") for _ in range(3)]
    urgent = submit(alice_client, feature="email-classify")
    queue = django_rq.get_queue(LLM_QUEUE)
    assert queue.get_job_ids()[0] == urgent.rq_job_id
    assert queue.get_job_ids()[1:] == [job.rq_job_id for job in batch]


def test_a_wait_in_the_worker_ends_soon_after_staff_remove_the_limit(
    alice_client, workers, fake_provider, settings
):
    """The chaos drill's fault: threads waiting on the limiter in process kept the limit they
    started under for their whole wait (up to LLM_RATE_LIMIT_MAX_WAIT_SECONDS), so removing it
    released nobody. Each ask reads the configured limits again, and no sleep outlasts the
    config cache's period."""
    from ratelimits.models import RateLimit
    from ratelimits.services import rate_limit_save

    settings.LLM_RATE_LIMIT_WINDOW_SECONDS = 30.0  # a full window frees in 30 s...
    settings.LLM_RATE_LIMIT_MAX_WAIT_SECONDS = 60.0  # ...which the worker would wait in process
    settings.LLM_RATE_LIMIT_CONFIG_CACHE_SECONDS = 0.5
    settings.LLM_RATE_LIMIT_BURST_SECONDS = 30.0  # no pacing: the window's count decides
    row = rate_limit_save(
        rate_limit=RateLimit(provider="anthropic", model="claude-sonnet-4-6", rpm=2, enabled=True)
    )
    for _ in range(2):  # two calls answered: the window is full for 30 s
        _verdict, reservation = reserve(rpm=2)
        limiter_settle(provider="anthropic", model="claude-sonnet-4-6", reservation_id=reservation)
    job = submit(alice_client)

    def staff_remove_the_limit() -> None:
        # From another process's point of view: this process's cache is not cleared at once
        # (rate_limit_delete would), only its period lets the change in.
        time.sleep(1.5)
        assert fake_provider.stats()["requests"] == 0  # the job still waits for its slot
        RateLimit.objects.filter(id=row.id).delete()
        connection.close()

    remover = threading.Thread(target=staff_remove_the_limit)
    started = time.monotonic()
    remover.start()
    workers.work_once()
    remover.join(timeout=10)
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    assert time.monotonic() - started < 6  # not the 30 s the removed limit asked for
