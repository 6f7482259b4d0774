"""The limiter on the real stack: real `manage.py rqworker llm` processes (several threads each)
against the fake provider over HTTP, with the provider's window and ours compressed to 3 s.

- A fresh install with nothing configured learns the provider's limits from its first answers,
  and from then on the provider never sees more calls in a window than its limit (it answers
  no 429 at all: it refuses exactly the calls that would pass it).
- After a 429 every worker pauses until the provider's reset: no call leaves any worker until
  then, except calls already on their way.
- An interactive feature with a higher weight, at the front of the queue, does not wait behind
  a flood of batch jobs.
"""

import io
import time

import django_rq
import pytest
from django.core.management import call_command

from jobs.models import LlmJob
from ledger.models import CostEntry
from llmops.queues import LLM_QUEUE
from ratelimits.limiter import STRICT_PACE_STRETCH
from ratelimits.selectors import rate_limit_statuses
from tests.conftest import submit
from tests.jobs.test_takeover import wait_for
from tests.ratelimits.conftest import llm_worker_env, reserve

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices"),
    pytest.mark.quiet,  # the pace as the provider counts arrivals: no other test's load beside
]

WINDOW = 3.0


def start_workers(processes, fake_provider, count: int, **env: str) -> None:
    for _ in range(count):
        processes.start(llm_worker_env(fake_provider, **env), "rqworker", LLM_QUEUE,
                        "--with-scheduler")  # fmt: skip


def sends(entries) -> list[float]:
    """When each attempt left the worker: its ledger row's time less the call's latency."""
    return sorted(e.created_at.timestamp() - (e.latency_ms or 0) / 1000 for e in entries)


def most_in_any_window(times: list[float], window: float) -> int:
    return max(
        (len([t for t in times[i:] if t < start + window]) for i, start in enumerate(times)),
        default=0,
    )


def all_done(count: int) -> bool:
    return LlmJob.objects.filter(status="completed").count() >= count


def test_workers_learn_the_limits_and_never_pass_them(alice_client, fake_provider, processes):
    fake_provider.faults(
        {}, rpm=6, itpm=20000, otpm=9000, rate_window_seconds=WINDOW, latency_ms="50-300"
    )
    for i in range(24):
        submit(alice_client, messages=[{"role": "user", "content": f"Classify ticket {i}"}])
    start_workers(processes, fake_provider, 3)  # 3 processes x 4 threads
    wait_for(lambda: all_done(24), timeout=60, what=f"24 jobs\n{processes.logs()}", every=0.2)

    stats = fake_provider.stats()
    assert stats["by_status"] == {"200": 24}, stats  # not one call over the limit: no 429
    assert set(LlmJob.objects.values_list("attempts", flat=True)) == {1}
    entries = list(CostEntry.objects.all())
    assert len(entries) == 24
    # Our own record agrees: at most 6 calls left in any 3 s (less 0.1 s for clock reading).
    assert most_in_any_window(sends(entries), WINDOW - 0.1) <= 6
    # And the limit was used, counted from the first call (not from the workers' start-up, which
    # takes seconds on a loaded machine): after the first window's 6 calls, the held jobs come
    # back one per window / 6 (0.52 s) from the first window's end, through rq's scheduler, which
    # looks once a second: 3.1 + 17 x 0.52 + 1 = 13 s. A limiter at 2/3 of the rate takes 17 s.
    claims = sorted(job.started_at.timestamp() for job in LlmJob.objects.all())
    assert claims[-1] - claims[0] < 4 * (WINDOW + 0.1) + 2, claims

    (status,) = rate_limit_statuses()
    assert (status.learned["requests"].limit, status.effective("rpm")) == (6, 6)
    assert status.learned["input_tokens"].limit == 20000
    assert status.learned["output_tokens"].limit == 9000
    assert not status.configured.any and not status.learning
    out = io.StringIO()
    call_command("ratelimit_status", stdout=out)
    text = out.getvalue()
    assert "anthropic/claude-sonnet-4-6" in text and "learned 6 (remaining" in text


def most_in(times: list[float], span: float) -> int:
    """The most of ``times`` (sorted) within any ``span`` seconds (inclusive)."""
    return max((len([t for t in times[i:] if t <= start + span]) for i, start in enumerate(times)),
               default=0)  # fmt: skip


def test_workers_pace_their_calls_against_a_provider_that_enforces_short_intervals(
    alice_client, fake_provider, processes
):
    """The provider allows 12 per 3 s and also at most 4 in any 1 s (it "may enforce a per-minute
    limit over shorter intervals"). The workers, starting fresh, pace one call every 3.5 s / 12
    (with the margin), stretched for strict pacing: 0.3 s, never more than 1 + t / 0.3 s in any t as
    the provider counts arrivals, and the provider refuses nothing (the old limiter, which let
    a window's 12 go at once: 21 429s for these 36 jobs)."""
    fake_provider.faults(
        {}, rpm=12, rate_window_seconds=WINDOW, short_interval_seconds=1, latency_ms="50-150"
    )
    for i in range(36):
        submit(alice_client, messages=[{"role": "user", "content": f"Tag ticket {i}"}])
    env = {"LLM_RATE_LIMIT_BURST_SECONDS": "0.8", "LLM_RATE_LIMIT_MARGIN_SECONDS": "0.5"}
    start_workers(processes, fake_provider, 3, **env)
    wait_for(lambda: all_done(36), timeout=90, what=f"36 jobs\n{processes.logs()}", every=0.2)

    statuses = fake_provider.stats()["by_status"]
    assert statuses.get("429", 0) <= 1, statuses
    interval = (WINDOW + 0.5) / 12 * STRICT_PACE_STRETCH
    # The provider's own arrival times, from the first answer on (the limits are learned from
    # it): burst + t / interval in any t, give or take 50 ms of send jitter.
    arrivals = fake_provider.arrivals()[4:]  # (the first 4 find the limits out together)
    assert len(arrivals) >= 30
    for span in (0.0, interval, 1.0, 2.0, WINDOW):
        assert most_in(arrivals, span) <= 1 + (span + 0.05) / interval, (span, arrivals)
    # And the rate was used: one call per interval, give or take a scheduler turn.
    assert arrivals[-1] - arrivals[0] <= len(arrivals) * interval + 2, arrivals


def test_after_a_429_every_worker_pauses_until_the_reset(alice_client, fake_provider, processes):
    fake_provider.faults({}, latency_ms="150")
    for i in range(36):
        submit(alice_client, messages=[{"role": "user", "content": f"Summarize {i}"}])
    start_workers(processes, fake_provider, 3)
    wait_for(lambda: fake_provider.stats()["requests"] >= 6, timeout=30, what="first calls")
    # The provider rate-limits every call for 0.4 s, asking for retry-after: 1.
    fake_provider.faults({"429": 1.0}, for_seconds=0.4, latency_ms="150")
    wait_for(lambda: all_done(36), timeout=60, what=f"36 jobs\n{processes.logs()}", every=0.2)

    limited = CostEntry.objects.filter(http_status=429).order_by("created_at")
    assert limited.exists()
    # The first 429 was answered (and the pause set) just before its ledger row was written.
    first_answer = limited[0].created_at.timestamp()
    # A send time is estimated (the ledger row's time less the call's latency), so it comes out
    # late by the row's own write; the pause window below starts 0.25 s after the first answer
    # for the same reason, and a call counts as already on its way up to there.
    in_flight_then = [t for t in sends(CostEntry.objects.all()) if t < first_answer + 0.25]
    during_pause = [
        t for t in sends(CostEntry.objects.all()) if first_answer + 0.25 < t < first_answer + 0.8
    ]
    assert during_pause == [], f"calls left during the pause: {during_pause}"
    # Only the calls already on their way met the 429, not one call per worker thread after.
    assert limited.count() <= 12
    assert limited.count() <= len(in_flight_then)
    assert LlmJob.objects.filter(status="completed").count() == 36


def test_an_interactive_feature_does_not_wait_behind_a_flood(
    alice_client, fake_provider, processes, settings
):
    settings.LLM_PRIORITY_FEATURES = frozenset({"email-classify"})  # enqueued by this process
    fake_provider.faults({}, rpm=6, rate_window_seconds=WINDOW, latency_ms="50-150")
    flood = [
        submit(alice_client, feature="summarize", messages=[{"role": "user", "content": f"S{i}"}])
        for i in range(40)
    ]
    env = {
        "LLM_FEATURE_WEIGHTS": '{"email-classify": 4}',
        "LLM_PRIORITY_FEATURES": "email-classify",
    }
    start_workers(processes, fake_provider, 3, **env)
    wait_for(lambda: CostEntry.objects.count() >= 8, timeout=30, what="the flood to run")
    trickle: list[LlmJob] = []
    for i in range(5):  # one interactive job every 1.2 s while the flood runs
        trickle.append(
            submit(alice_client, feature="email-classify",
                   messages=[{"role": "user", "content": f"Classify {i}"}])
        )  # fmt: skip
        time.sleep(1.2)
    ids = [job.id for job in trickle]
    wait_for(
        lambda: LlmJob.objects.filter(id__in=ids, status="completed").count() == 5,
        timeout=30,
        what=f"the interactive jobs\n{processes.logs()}",
    )
    waits = [
        (job.started_at - job.created_at).total_seconds()
        for job in LlmJob.objects.filter(id__in=ids)
    ]
    # A slot frees every 0.5 s: an interactive job waits about one, never for the flood.
    assert max(waits) < 2.5, waits
    flood_left = LlmJob.objects.filter(id__in=[j.id for j in flood]).exclude(status="completed")
    assert flood_left.count() >= 10  # the flood was still far from done
    assert "429" not in fake_provider.stats()["by_status"]


def test_a_thread_waiting_for_the_limiter_leaves_its_database_slot_to_others(
    alice_client, fake_provider, processes
):
    """One database connection slot, two job threads: while one thread waits (in process) for
    its limiter slot, the other runs a job from start to record on the slot it left."""
    fake_provider.faults({}, latency_ms="50")
    start_workers(
        processes,
        fake_provider,
        1,
        LLM_WORKER_CONCURRENCY="2",
        LLM_WORKER_DB_CONNECTIONS="1",
        LLM_RATE_LIMIT_MAX_WAIT_SECONDS="6",
        LLM_RATE_LIMITS='{"claude-sonnet-4-6": {"rpm": 1}}',
    )
    warm_up = submit(alice_client, model="claude-haiku-4-5")
    wait_for(lambda: all_done(1), timeout=60, what=f"the warm-up job\n{processes.logs()}")
    reserve(rpm=1)  # another host's call fills the sonnet window for the next 3.1 s
    filled = time.time()
    waiting = submit(alice_client)  # sonnet: its thread waits about 3 s for the limiter
    queue = django_rq.get_queue(LLM_QUEUE)
    wait_for(lambda: queue.fetch_job(waiting.rq_job_id).get_status() == "started", timeout=5,
             what="the first job to be taken", every=0.05)  # fmt: skip
    other = submit(alice_client, model="claude-haiku-4-5")  # no limit: it may start at once
    wait_for(lambda: all_done(3), timeout=30, what=f"both jobs\n{processes.logs()}", every=0.1)
    waiting.refresh_from_db()
    other.refresh_from_db()
    assert waiting.started_at.timestamp() >= filled + 2.5  # it did wait for the limiter...
    assert other.completed_at < waiting.started_at  # ...and the other job ran meanwhile
    assert warm_up.id not in (waiting.id, other.id)
