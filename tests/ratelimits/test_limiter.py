"""The limiter's Lua scripts against the real Redis, on a window compressed to 2 s: never more
than a limit in any window (from many threads at once), tokens given back at settlement, the
shared pause, learning, shares by feature weight and by user, and a Redis flush mid-run."""

import email.utils
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import django_rq
import pytest

from llmops.queues import LLM_QUEUE, rate_limit_key
from providers.ratelimit_headers import DEFAULT_PAUSE_SECONDS, learned_from_headers, pause_after_429
from ratelimits.limiter import limiter_mark_sent
from ratelimits.selectors import rate_limit_statuses
from tests.ratelimits.conftest import (
    MODEL,
    PROVIDER,
    admitted_at_once,
    burst_at_once,
    reserve,
    reserve_together,
    settle,
)

pytestmark = pytest.mark.django_db


def redis() -> Any:
    return django_rq.get_connection(LLM_QUEUE)


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def window_times() -> list[float]:
    """The send times (s) of every reservation that counts a request, as the window holds them."""
    key = rate_limit_key(PROVIDER, MODEL, "window")
    return [score / 1000 for _, score in redis().zrange(key, 0, -1, withscores=True)]


def test_it_admits_the_limit_then_says_when_a_slot_frees():
    admitted = [reserve(rpm=5)[0] for _ in range(5)]
    assert all(v.admitted for v in admitted)
    refused, _ = reserve(rpm=5, max_wait_ms=0)
    assert refused.status == 2 and refused.reason == "requests"
    # The oldest call leaves the 2 s window in about 2 s: the job is held about that long.
    assert 1500 <= refused.ms <= 2100


def test_a_short_wait_is_offered_in_process_and_a_long_one_as_a_hold():
    for _ in range(3):
        reserve(rpm=3)
    time.sleep(1.5)
    verdict, _ = reserve(rpm=3, max_wait_ms=990)
    assert verdict.status == 0 and 300 <= verdict.ms <= 600  # wait in process, then ask again
    time.sleep(verdict.ms / 1000 + 0.02)
    assert reserve(rpm=3, max_wait_ms=990)[0].admitted


def test_sixteen_threads_never_exceed_the_limit_in_any_window():
    limit, stop = 10, time.monotonic() + 4.5
    sent: list[tuple[float, float]] = []  # each admitted call: asked at, answered at
    lock = threading.Lock()

    def hammer() -> None:
        while time.monotonic() < stop:
            asked = time.time()
            verdict, _ = reserve(rpm=limit, max_wait_ms=990)
            if verdict.admitted:
                with lock:
                    sent.append((asked, time.time()))
            else:
                time.sleep(min(verdict.ms, 200) / 1000)

    threads = [threading.Thread(target=hammer) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    times = sorted(window_times())
    assert len(times) >= limit  # the last window's calls (older ones were trimmed)
    assert len(sent) >= 2 * limit  # it used the limit: at least two windows' worth in 4.5 s
    for i, start in enumerate(times):
        in_window = [t for t in times[i:] if t < start + 2.0]
        assert len(in_window) <= limit, f"{len(in_window)} calls within 2 s of {start}"
    sent.sort()
    for i, (start, _) in enumerate(sent):
        # Our own clock, not Redis': a few ms of skew between the two is allowed for. Each call
        # was admitted between its ask and its answer; those surely admitted within 1.95 s of
        # this one's ask are the ones answered by then (an answer stamp alone moved a call
        # whose thread waited for the GIL into the next window: CI, 2026-12-07).
        assert len([a for _, a in sent[i:] if a < start + 1.95]) <= limit


def test_tokens_not_used_are_given_back_at_settlement():
    first, reservation = reserve(output_tpm=1000, output_tokens=800)
    assert first.admitted
    refused, _ = reserve(output_tpm=1000, output_tokens=800)
    assert refused.reason == "output_tokens"
    settle(reservation, input_tokens=5, output_tokens=100)
    assert reserve(output_tpm=1000, output_tokens=800)[0].admitted  # 100 + 800 fit


def test_a_release_takes_the_reservation_away():
    _, reservation = reserve(rpm=1)
    assert reserve(rpm=1)[0].reason == "requests"
    settle(reservation, mode="drop")
    assert reserve(rpm=1)[0].admitted


def test_a_429_pauses_every_caller_until_the_reset():
    _, reservation = reserve(rpm=100)
    settle(reservation, pause_seconds=1.2)
    for feature in ("summarize", "email-classify"):
        verdict, _ = reserve(rpm=100, feature=feature, max_wait_ms=0)
        assert verdict.reason == "paused" and 900 <= verdict.ms <= 1200
    time.sleep(1.25)
    assert reserve(rpm=100)[0].admitted


def test_limits_are_learned_from_the_headers_of_an_answer():
    headers = {
        "anthropic-ratelimit-requests-limit": "3",
        "anthropic-ratelimit-requests-remaining": "2",
        "anthropic-ratelimit-requests-reset": "2030-01-01T00:00:00Z",
        "anthropic-ratelimit-input-tokens-limit": "30000",
        "anthropic-ratelimit-input-tokens-remaining": "29000",
        "anthropic-ratelimit-input-tokens-reset": "2030-01-01T00:00:00Z",
        "Anthropic-RateLimit-Output-Tokens-Limit": "8000",
        "anthropic-ratelimit-tokens-limit": "38000",
    }
    learned = learned_from_headers(headers)
    assert learned["requests"][:2] == (3, 2)
    assert learned["output_tokens"] == (8000, -1, 0)
    assert "tokens" not in learned  # only the sum of the two it already has
    _, reservation = reserve()  # nothing known: a first call goes out
    settle(reservation, learned=learned)
    assert reserve()[0].admitted and reserve()[0].admitted
    assert reserve()[0].reason == "requests"  # 3 calls: the learned limit
    (status,) = rate_limit_statuses()
    assert status.learned["requests"].limit == 3 and status.effective("rpm") == 3
    assert status.effective("input_tpm") == 30000 and status.effective("output_tpm") == 8000
    # A configured limit below the learned one holds the workers lower, never higher.
    assert reserve(rpm=100)[0].reason == "requests"


def test_until_the_first_answer_only_a_few_calls_are_in_flight(settings):
    settings.LLM_RATE_LIMIT_BOOTSTRAP_CONCURRENCY = 2
    first, reservation = reserve()
    assert first.admitted and reserve()[0].admitted
    learning, _ = reserve(max_wait_ms=990)
    assert learning.status == 0 and learning.reason == "learning"
    settle(reservation, learned={})  # an answer without limits: nothing to hold back
    assert all(reserve()[0].admitted for _ in range(20))


def test_a_waiting_high_weight_feature_gets_the_next_slots_before_a_flood():
    weights = {"email-classify": 4}
    assert reserve(rpm=10, feature="summarize", weights=weights)[0].admitted
    time.sleep(0.3)  # the first call leaves the window alone, one slot at a time
    for _ in range(9):
        assert reserve(rpm=10, feature="summarize", weights=weights)[0].admitted
    # The window is full; an interactive job now waits (in process) for the next slot.
    waiting, _ = reserve(rpm=10, feature="email-classify", job="email-1", weights=weights,
                         max_wait_ms=5000)  # fmt: skip
    assert waiting.status == 0
    time.sleep(waiting.ms / 1000 + 0.05)
    # A slot is free, but it is held back for the waiting email job: the flood does not get it.
    blocked, _ = reserve(rpm=10, feature="summarize", weights=weights)
    assert blocked.reason == "share"
    assert reserve(rpm=10, feature="email-classify", job="email-1", weights=weights)[0].admitted


def test_an_idle_feature_leaves_its_share_to_the_others():
    weights = {"email-classify": 4}
    assert all(reserve(rpm=10, feature="summarize", weights=weights)[0].admitted for _ in range(10))


def test_two_floods_share_the_limit_by_weight():
    """Two backlogs of 300 jobs, 4 worker threads each, as the queue runs them: a job with no
    slot soon is held (put aside until the time the limiter gave) and the next one is taken;
    a held job is taken again once due."""
    weights = {"email-classify": 3, "summarize": 1}
    features = ("email-classify", "summarize")
    # Long enough that a busy machine's scheduling delays average out (the share is counted
    # over the last 6 s, some 70 calls).
    stop = time.monotonic() + 8.0
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    backlog = {f: [f"{f}-{i}" for i in range(300)] for f in features}
    held: dict[str, list[tuple[float, str]]] = {f: [] for f in features}

    def next_job(feature: str) -> str | None:
        with lock:
            due = sorted(h for h in held[feature] if h[0] <= time.monotonic())
            if due:
                held[feature].remove(due[0])
                return due[0][1]
            return backlog[feature].pop(0) if backlog[feature] else None

    def worker_thread(feature: str) -> None:
        while time.monotonic() < stop:
            job = next_job(feature)
            if job is None:
                time.sleep(0.01)
                continue
            while True:
                verdict, _ = reserve(rpm=20, feature=feature, job=job, weights=weights,
                                     max_wait_ms=990)  # fmt: skip
                if verdict.admitted:
                    if time.monotonic() > stop - 6.0:  # after the first window: the steady share
                        with lock:
                            counts[feature] += 1
                    break
                if verdict.status == 0:
                    time.sleep(verdict.ms / 1000)
                    continue
                with lock:
                    held[feature].append((time.monotonic() + verdict.ms / 1000, job))
                break

    threads = [threading.Thread(target=worker_thread, args=(f,)) for f in features for _ in "1234"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = counts["email-classify"] + counts["summarize"]
    assert total >= 25  # about 30 in 3 s at 20 per 2 s: the limit is used
    assert counts["email-classify"] / total >= 0.65, counts  # weight 3 of 4: 75 %
    assert counts["summarize"] / total >= 0.15, counts  # and the batch is not starved


def test_one_user_alone_gets_the_whole_limit():
    assert all(reserve(rpm=8, user="alice")[0].admitted for _ in range(8))
    assert reserve(rpm=8, user="alice")[0].reason == "requests"


def test_a_user_who_already_has_half_gives_way_to_a_waiting_user():
    reserve(rpm=8, user="alice")
    time.sleep(0.3)
    for _ in range(7):
        reserve(rpm=8, user="alice")
    bob, _ = reserve(rpm=8, user="bob", job="bob-1", max_wait_ms=5000)
    assert bob.status == 0  # bob waits for the next slot, which is held back for him
    time.sleep(bob.ms / 1000 + 0.05)
    assert reserve(rpm=8, user="alice")[0].reason == "share"
    assert reserve(rpm=8, user="bob", job="bob-1")[0].admitted


def test_a_hard_user_cap_applies_even_alone(settings):
    settings.LLM_USER_MAX_SHARE = 0.5
    assert all(reserve(rpm=8, user="alice")[0].admitted for _ in range(4))
    assert reserve(rpm=8, user="alice")[0].reason == "user_max_share"
    assert reserve(rpm=8, user="bob")[0].admitted


def test_held_jobs_of_a_flood_come_back_spaced_at_the_rate_of_the_limit():
    for _ in range(10):
        reserve(rpm=10)
    # Asked in one transaction, so that each hold's ms counts from the same instant (asked one by
    # one, a loaded host's 60 ms between two asks came off the gap).
    holds = reserve_together(rpm=10, waits=[0] * 5, jobs=[f"held-{i}" for i in range(5)])
    assert all(v.status == 2 for v in holds)
    gaps = [b.ms - a.ms for a, b in zip(holds, holds[1:], strict=False)]
    assert all(180 <= gap <= 220 for gap in gaps), gaps  # 2 s / 10 calls = 200 ms apart
    # A held job that comes back and finds no room keeps its place instead of going last.
    again, _ = reserve(rpm=10, job="held-0")
    assert again.status == 2 and again.ms < holds[-1].ms


def test_a_flushed_redis_catches_up_from_the_providers_count():
    reset = int((time.time() + 1.5) * 1000)
    for used in range(1, 6):
        _, reservation = reserve()
        settle(reservation, learned={"requests": (5, 5 - used, reset)})
    learned = {"requests": (5, 0, reset)}
    redis().flushdb()  # every key gone: the window, the learned limits
    _, reservation = reserve()  # learning again: one call goes out
    settle(reservation, learned=learned, pause_seconds=(reset - time.time() * 1000) / 1000)
    # The provider said 5 of 5 used until its reset: the window takes that count, so nothing
    # else goes out before the reset, even once the pause is over.
    verdict, _ = reserve(max_wait_ms=0)
    assert verdict.status == 2 and verdict.reason in ("paused", "requests")
    redis().delete(rate_limit_key(PROVIDER, MODEL, "pause"))
    assert reserve(max_wait_ms=0)[0].reason == "requests"
    time.sleep(1.6)
    assert reserve()[0].admitted


def http_date(epoch: float) -> str:
    return email.utils.formatdate(epoch, usegmt=True)


def test_pause_after_429_prefers_retry_after_then_a_spent_limits_reset():
    now = time.time()
    spent = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": rfc3339(now + 7),
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "10",
        "date": http_date(now),
    }
    assert pause_after_429(retry_after=3.0, headers=spent) == 3.0
    assert pause_after_429(retry_after=None, headers=spent) == 7.0
    assert pause_after_429(retry_after=None, headers={}) == 5.0
    assert pause_after_429(retry_after=86400.0, headers={}) == 900.0


def test_pause_after_429_reads_the_reset_on_the_providers_clock_not_ours():
    """A provider whose clock is an hour ahead of the worker's (or behind it): its reset, 7 s
    after its own Date, is a pause of 7 s, not of 3607 s (capped to 900) nor of none."""
    now = time.time()
    for skew in (3600.0, -3600.0, 42.0):
        headers = {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": rfc3339(now + skew + 7),
            "date": http_date(now + skew),
        }
        assert pause_after_429(retry_after=None, headers=headers) == 7.0, skew
        # What is learned is on our clock: the reset 7 s from now, whatever the provider's.
        (_, _, reset) = learned_from_headers(headers, now=now)["requests"]
        assert abs(reset / 1000 - (now + 7)) <= 1.0, skew
    # Without a Date, a reset alone cannot be read: the default pause, not our clock's guess.
    del headers["date"]
    assert pause_after_429(retry_after=None, headers=headers) == DEFAULT_PAUSE_SECONDS


# --- Pacing (fault 8 of issue 18: a minute's budget left in one burst) ---------------------------


def test_requests_are_paced_with_a_bounded_burst(settings):
    """Sixteen threads asking all the time: at most burst + t * R / window calls in any t (here
    2 + t / 0.2 s), and the rate is used; the old limiter let the whole limit go at once."""
    settings.LLM_RATE_LIMIT_WINDOW_SECONDS = 4.0  # long enough that nothing is trimmed below
    settings.LLM_RATE_LIMIT_BURST_SECONDS = 0.4  # 2 calls of 20 per 4 s (one per 0.2 s)
    stop = time.monotonic() + 3.0

    def hammer() -> None:
        while time.monotonic() < stop:
            verdict, _ = reserve(rpm=20, max_wait_ms=990)
            if not verdict.admitted:
                time.sleep(min(verdict.ms, 50) / 1000)

    threads = [threading.Thread(target=hammer) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    times = sorted(window_times())  # Redis' own admission times
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            admitted, span = j - i + 1, times[j] - start
            assert admitted <= 2 + span / 0.2 + 1e-6, f"{admitted} calls within {span:.3f} s"
    assert len(times) >= 2 + 14  # 3 s at one per 0.2 s after the burst, less a slot or so


def test_paced_slots_are_given_ahead_up_to_the_horizon_to_callers_that_may_wait(settings):
    """A call whose only wait is its paced slot gets that slot up to
    LLM_RATE_LIMIT_PACE_AHEAD_SECONDS ahead, beyond its own in-process wait: held jobs come back
    once a second (rq's scheduler), and a slot nobody holds when it comes is lost. The next one
    beyond the horizon is held; a caller that may not wait at all gets no slot ahead."""
    settings.LLM_RATE_LIMIT_BURST_SECONDS = 0.1  # a burst of one call at 20 per 2 s (100 ms)
    settings.LLM_RATE_LIMIT_PACE_AHEAD_SECONDS = 0.35
    verdicts = reserve_together(rpm=20, waits=[150, 150, 150, 150, 150, 0])
    assert verdicts[0].admitted and verdicts[0].ms == 0
    slots = [v.ms for v in verdicts[1:4]]
    assert all(v.admitted for v in verdicts[1:4]), verdicts
    # Slots 100, 200 and 300 ms ahead: the last two past the callers' own 150 ms of wait.
    assert [round(ms, -2) for ms in slots] == [100, 200, 300], slots
    assert (verdicts[4].status, verdicts[4].reason) == (2, "pacing"), verdicts[4]
    assert 350 < verdicts[4].ms <= 450, verdicts[4]  # beyond the horizon: held until its slot
    assert (verdicts[5].status, verdicts[5].reason) == (2, "pacing"), verdicts[5]


def test_a_429_that_still_shows_room_shrinks_the_burst_until_it_regrows(settings):
    """The provider refused a call its headers had room for: it enforces a shorter interval.
    The burst drops to one call (strict pacing) and doubles back every recovery period; a 429
    of a spent limit (remaining 0) teaches nothing about intervals."""
    settings.LLM_RATE_LIMIT_BURST_SECONDS = 0.1  # 5 calls of 100 per 2 s (one per 20 ms)
    # Recovery periods long beside a busy machine's scheduling delays (each check below has
    # about a second before the next doubling would change its answer).
    settings.LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS = 1.2

    def burst_now() -> int:
        time.sleep(0.15)  # the bucket refills to its burst (the window stays far from full)
        return burst_at_once(rpm=100)

    def refused_with(remaining: int) -> None:
        time.sleep(0.05)
        verdict, reservation = reserve(rpm=100)
        assert verdict.admitted
        # (A reset already past: the provider's count does not replace ours here.)
        learned = {"requests": (100, remaining, int(time.time() * 1000) - 1000)}
        settle(reservation, learned=learned, rate_limited=True)

    assert burst_now() == 5
    refused_with(remaining=0)
    assert burst_now() == 5  # a spent limit's 429: the burst is kept
    refused_with(remaining=6)
    shrunk = time.monotonic()
    time.sleep(0.15)
    # At once (one transaction): a burst of one; the next call refused for pacing; then a call
    # allowed to wait in process is given the next paced slot, due in (at most) 20 ms and a
    # stretch (strict pacing after the lesson), and the one after it a slot later.
    verdicts = reserve_together(rpm=100, waits=[0, 0, 1000, 1000])
    assert admitted_at_once(verdicts[:2]) == 1
    assert (verdicts[1].status, verdicts[1].reason) == (2, "pacing")
    first, second = verdicts[2], verdicts[3]
    assert first.admitted and 1 <= first.ms <= 21, first
    gap = second.ms - first.ms
    assert second.admitted and 19 <= gap <= 22, (first, second)
    time.sleep(max(0.0, shrunk + 1.25 - time.monotonic()))  # (the slots given above pass)
    assert burst_now() == 2  # one recovery period later: doubled
    time.sleep(max(0.0, shrunk + 3.65 - time.monotonic()))
    assert burst_now() == 5  # three periods: 8, capped at the configured burst


def test_a_limiter_that_starts_pacing_earns_its_burst(settings):
    """Slow start: a fresh limiter (or one Redis lost) sends one call at a time, doubling its
    burst every recovery period up to the setting, so its first burst never meets a provider
    that enforces short intervals with many calls at once."""
    settings.LLM_RATE_LIMIT_SLOW_START = True
    settings.LLM_RATE_LIMIT_BURST_SECONDS = 0.1  # 5 calls of 100 per 2 s
    settings.LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS = 1.0

    def burst_now() -> int:
        time.sleep(0.15)
        return burst_at_once(rpm=100)

    started = time.monotonic()
    assert burst_now() == 1
    time.sleep(max(0.0, started + 1.1 - time.monotonic()))
    assert burst_now() == 2
    time.sleep(max(0.0, started + 3.1 - time.monotonic()))
    assert burst_now() == 5


def test_the_strict_margin_doubles_with_each_lesson_and_halves_back(settings):
    """A short-interval 429 of a call paced under the margin in force says the host's jitter
    outgrew it: the margin doubles (2, 4, 8 %); a call refused together with one that already
    taught it (sent before the change) teaches nothing more; each recovery period without a
    429 halves it. Seen in the paced slots: one every 200 ms, stretched by the margin."""
    settings.LLM_RATE_LIMIT_WINDOW_SECONDS = 20.0  # 100 calls: one every 200 ms
    settings.LLM_RATE_LIMIT_BURST_SECONDS = 1.0  # a burst of 5 when nothing was learned
    settings.LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS = 60.0

    def spacing() -> int:
        """The gap between the last two of four paced slots given at once (ms)."""
        verdicts = reserve_together(rpm=100, waits=[5000] * 4)
        assert all(v.admitted for v in verdicts), verdicts
        return verdicts[-1].ms - verdicts[-2].ms

    def sent() -> str:
        verdict, reservation = reserve(rpm=100, max_wait_ms=5000)
        assert verdict.admitted, verdict
        time.sleep(verdict.ms / 1000)
        while wait := limiter_mark_sent(provider=PROVIDER, model=MODEL, reservation_id=reservation):
            time.sleep(wait / 1000)
        return reservation

    def refused(reservation: str) -> None:
        """Answered 429 with room left: a shorter interval than the window is enforced."""
        learned = {"requests": (100, 90, int(time.time() * 1000) - 1000)}
        settle(reservation, learned=learned, rate_limited=True)

    refused(sent())  # not strict before: strict from here, at the first margin
    assert 203 <= spacing() <= 205  # 2 %
    on_its_way = sent()
    refused(sent())  # paced under 2 %: the jitter outgrew it
    assert 207 <= spacing() <= 209  # 4 %
    refused(on_its_way)  # sent before that change: the same lesson
    assert 207 <= spacing() <= 209
    refused(sent())
    assert 215 <= spacing() <= 217  # 8 %

    settings.LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS = 1.0
    time.sleep(1.1)  # a period without a 429: the burst doubles, the margin halves
    assert 207 <= spacing() <= 209  # 4 %


def test_under_strict_pacing_a_call_that_never_left_gives_back_only_the_last_slot_ahead(
    settings,
):
    """A reservation dropped (its budget refused, its claim lost) gave its slot back by moving
    the pace one interval back: with slots given after it, or once it had passed, the next call
    was paced right behind the last one that left, and a short-interval provider refused it."""
    settings.LLM_RATE_LIMIT_SLOW_START = True  # strict pacing from the start: a burst of one
    settings.LLM_RATE_LIMIT_WINDOW_SECONDS = 20.0  # 100 calls: one every 204 ms (with 2 %)
    settings.LLM_RATE_LIMIT_BURST_SECONDS = 1.0
    settings.LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS = 60.0
    first = reserve(rpm=100, max_wait_ms=5000)
    second = reserve(rpm=100, max_wait_ms=5000)
    assert first[0].admitted and second[0].admitted and second[0].ms >= 150, (first, second)
    settle(first[1], mode="drop")  # its slot (now) has passed, and one was given after it
    third = reserve(rpm=100, max_wait_ms=5000)
    assert third[0].admitted and third[0].ms >= second[0].ms + 150, (second, third)
    settle(third[1], mode="drop")  # the last slot given, still ahead: it goes back
    fourth = reserve(rpm=100, max_wait_ms=5000)
    assert fourth[0].admitted and abs(fourth[0].ms - third[0].ms) <= 50, (third, fourth)


def test_calls_leaving_late_under_strict_pacing_do_not_add_up_their_lateness(settings):
    """Thirty paced calls all leave about a second after their slots (a loaded host: the budget
    and the claim came between). The next call is still due about one interval after them, not
    after the sum of their lateness: adding each late call's lateness to the pace pushed it
    hundreds of seconds ahead in the full drill, and held every job of the model that long."""
    settings.LLM_RATE_LIMIT_SLOW_START = True  # strict pacing from the start: a burst of one
    settings.LLM_RATE_LIMIT_BURST_SECONDS = 0.1
    settings.LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS = 60.0  # and it stays strict
    given = [reserve(rpm=100, max_wait_ms=5000)]
    after_first = time.monotonic()
    given += [reserve(rpm=100, max_wait_ms=5000) for _ in range(28)]
    before_last = time.monotonic()
    given.append(reserve(rpm=100, max_wait_ms=5000))
    assert all(verdict.admitted for verdict, _ in given), given
    # One slot every 20.4 ms (20 ms and the 2 % stretch): the last slot is 29 of them after the
    # first. Its ``ms`` counts from its own reservation, so the time the reservations took is
    # added back (at most what passed between the two scripts: a loaded host takes tens of ms).
    assert given[-1][0].ms + (before_last - after_first) * 1000 >= 28 * 20
    time.sleep(given[-1][0].ms / 1000 + 0.5)  # every slot has passed: each call is late
    for _, reservation in given:
        assert limiter_mark_sent(provider=PROVIDER, model=MODEL, reservation_id=reservation) == 0
    verdict, _ = reserve(rpm=100, max_wait_ms=5000)
    assert verdict.admitted and verdict.ms <= 100, verdict


def test_a_late_call_moves_the_next_slot_by_its_lateness_past_tolerance_once_a_429_taught_it(
    settings,
):
    """Under a fresh limiter's slow start (a burst of one, nothing learned yet) a call 160 ms
    late moves the slot after it by only 60 ms: 100 ms (2 % of the 5 s burst) are absorbed
    there, since moving slots for every call 40 ms late cost 2 to 5 % of R on a loaded host
    against a plain window. Once a short-interval 429 has taught the limiter, a
    call 160 ms late (the tolerance absorbs 40 ms at the first margin) keeps the slot after it
    one interval after its send less those 40 ms, the spacing a call late by just 40 ms keeps:
    moving it a whole interval after the send lost the absorbed 40 ms again at every late call
    (1-2 % of R in bench/ratelimit.py on a loaded host)."""
    settings.LLM_RATE_LIMIT_SLOW_START = True  # strict pacing from the start: a burst of one
    settings.LLM_RATE_LIMIT_WINDOW_SECONDS = 20.0  # 100 calls: one every 204 ms (with 2 %)
    settings.LLM_RATE_LIMIT_BURST_SECONDS = 5.0
    settings.LLM_RATE_LIMIT_BURST_RECOVERY_SECONDS = 60.0
    key = rate_limit_key(PROVIDER, MODEL, "window")

    def late_call_then_next() -> tuple[float, float, float]:
        """(the interval given, how late the first left, the next slot after its send)."""
        first = reserve(rpm=100, max_wait_ms=5000)
        second = reserve(rpm=100, max_wait_ms=5000)
        assert first[0].admitted and second[0].admitted, (first, second)
        slot = redis().zscore(key, first[1])
        spacing = redis().zscore(key, second[1]) - slot
        time.sleep(max(0.0, (slot + 160) / 1000 - time.time()))
        assert limiter_mark_sent(provider=PROVIDER, model=MODEL, reservation_id=first[1]) == 0
        sent_at = redis().zscore(key, first[1])
        return spacing, sent_at - slot, redis().zscore(key, second[1]) - sent_at

    spacing, late, after = late_call_then_next()
    assert 200 <= spacing <= 210 and late >= 150, (spacing, late)
    assert spacing - 100 - 2 <= after <= spacing - 100 + 2, (spacing, late, after)

    learned = {"requests": (100, 90, int(time.time() * 1000) - 1000)}
    settle(reserve(rpm=100, max_wait_ms=5000)[1], learned=learned, rate_limited=True)
    spacing, late, after = late_call_then_next()
    assert 200 <= spacing <= 210 and late >= 150, (spacing, late)
    assert spacing - 40 - 2 <= after <= spacing - 40 + 2, (spacing, late, after)


def test_pacing_that_starts_behind_the_first_calls_keeps_one_slot_more_for_them(settings):
    """Four calls left together before any answer told the rate (fresh workers, each opening
    its connection after our stamp: up to ~460 ms later at the provider on a loaded host). The
    first paced call is due five intervals after the oldest of them, not four: counting them
    from their stamps put the 11th call 4.7 s after the first to arrive, and a provider that
    enforces any 5 s refused it."""
    settings.LLM_RATE_LIMIT_BOOTSTRAP_CONCURRENCY = 4
    settings.LLM_RATE_LIMIT_SLOW_START = True  # strict pacing as a fresh limiter starts it
    first = [reserve(max_wait_ms=5000) for _ in range(4)]
    assert all(verdict.admitted and verdict.ms == 0 for verdict, _ in first), first
    key = rate_limit_key(PROVIDER, MODEL, "window")
    oldest = min(redis().zscore(key, reservation) for _, reservation in first)
    # 20 calls in the 2 s window: one every 102 ms with the 2 % of strict pacing.
    learned = {"requests": (20, 16, int(time.time() * 1000) + 2000)}
    settle(first[0][1], learned=learned)
    verdict, reservation = reserve(max_wait_ms=5000)
    assert verdict.admitted, verdict
    slot = redis().zscore(key, reservation)
    assert 5 * 100 <= slot - oldest <= 5 * 102 + 5, slot - oldest
