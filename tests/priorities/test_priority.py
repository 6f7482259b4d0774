"""Priority per job (issue 43, 2): ``high`` jobs leave the llm queue and pass the rate limiter
before waiting ``normal`` ones, ``low`` after them, a low job at most
``LLM_PRIORITY_MAX_WAIT_SECONDS`` behind newer work; a feature policy's ``default_priority``
(and ``LLM_PRIORITY_FEATURES``) for jobs that do not say. Real MariaDB, Redis, RQ worker
processes and the fake provider."""

import time
from typing import Any

import django_rq
import pytest
from rest_framework.test import APIClient
from rq.queue import Queue

from jobs.models import LlmJob
from jobs.reconciler import promote_starved_low_jobs
from keys.testing import api_key_for
from llmops.queues import LLM_QUEUE
from ratelimits.configured_limits import limiter_line
from tests.batches.helpers import item, submit_batch
from tests.conftest import make_user, submit
from tests.jobs.test_takeover import Processes, wait_for, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def _queue() -> Queue:
    return django_rq.get_queue(LLM_QUEUE)


def _prompt(label: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": label}], **extra}


def test_the_queue_keeps_three_lanes_whoever_pushes(alice_client: Any) -> None:
    order = ["normal", "low", "high", "normal", "low", "high", "normal"]
    jobs = [submit(alice_client, priority=p, **_prompt(f"{p} {i}")) for i, p in enumerate(order)]
    by = {p: [j.rq_job_id for j in jobs if j.priority == p] for p in ("high", "normal", "low")}
    assert _queue().get_job_ids() == by["high"] + by["normal"] + by["low"]
    # A push by rq itself (its scheduler moving a due retry in, a bulk insert) keeps the lanes.
    late = submit(alice_client, priority="normal", **_prompt("late"))
    queue = _queue()
    queue.connection.lrem(queue.key, 1, late.rq_job_id)
    queue.push_job_id(late.rq_job_id)
    assert queue.get_job_ids() == by["high"] + by["normal"] + [late.rq_job_id] + by["low"]


def test_two_high_jobs_after_six_normal_ones_run_among_the_first_four(
    alice_client: Any, fake_provider: Any, tmp_path: Any
) -> None:
    """The issue's check: one worker, one call at a time, the worker already busy."""
    fake_provider.faults({}, latency_ms="400")
    normal = [submit(alice_client, **_prompt(f"normal {i}")) for i in range(6)]
    processes = Processes(tmp_path)
    try:
        processes.start(
            worker_env(fake_provider, LLM_WORKER_CONCURRENCY="1"), "rqworker", LLM_QUEUE
        )
        wait_for(
            lambda: LlmJob.objects.filter(status="running").exists()
            or LlmJob.objects.filter(status="completed").exists(),
            timeout=60,
            what=f"the first job\n{processes.logs()}",
        )
        high = [submit(alice_client, priority="high", **_prompt(f"high {i}")) for i in range(2)]
        wait_for(
            lambda: LlmJob.objects.filter(status="completed").count() == 8,
            timeout=90,
            what=f"eight jobs\n{processes.logs()}",
        )
    finally:
        processes.stop_all()
    started = list(LlmJob.objects.order_by("started_at").values_list("id", flat=True))
    first_four = set(started[:4])
    assert {job.id for job in high} <= first_four, (started, [j.id for j in high])
    assert started[0] == normal[0].id  # the one already running when they came
    assert fake_provider.stats()["requests"] == 8


def test_a_low_job_waits_behind_normal_ones_until_its_bound(
    alice_client: Any, settings: Any
) -> None:
    low = submit(alice_client, priority="low", **_prompt("low"))
    normal = [submit(alice_client, **_prompt(f"normal {i}")) for i in range(3)]
    assert _queue().get_job_ids()[-1] == low.rq_job_id
    settings.LLM_PRIORITY_MAX_WAIT_SECONDS = 3600
    assert promote_starved_low_jobs().promoted_low == 0
    settings.LLM_PRIORITY_MAX_WAIT_SECONDS = 0.5
    time.sleep(0.6)
    assert promote_starved_low_jobs().promoted_low == 1
    assert _queue().get_job_ids() == [low.rq_job_id] + [j.rq_job_id for j in normal]


def test_a_feature_policy_default_and_the_old_setting(alice_client: Any, settings: Any) -> None:
    admin_client_api = APIClient()
    editor = make_user("editor", "change_featurepolicy", "view_featurepolicy", is_staff=True)
    admin_client_api.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_for(editor)}")
    answer = admin_client_api.put(
        "/api/v1/features/nightly-digest/", {"default_priority": "low"}, format="json"
    )
    assert answer.status_code == 200 and answer.json()["default_priority"] == "low"
    assert submit(alice_client, feature="nightly-digest").priority == "low"
    assert submit(alice_client, feature="nightly-digest", priority="high").priority == "high"
    settings.LLM_PRIORITY_FEATURES = frozenset({"support-chat"})
    assert submit(alice_client, feature="support-chat").priority == "high"
    assert submit(alice_client, feature="email-classify").priority == "normal"
    bad = admin_client_api.put(
        "/api/v1/features/nightly-digest/", {"default_priority": "urgent"}, format="json"
    )
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_priority"
    cleared = admin_client_api.put(
        "/api/v1/features/nightly-digest/", {"default_priority": None}, format="json"
    )
    assert cleared.json()["default_priority"] is None


def test_a_bad_priority_is_refused_and_nothing_is_written(alice_client: Any) -> None:
    for path, body in (
        ("/api/v1/jobs/", {"feature": "x", "model": "claude-haiku-4-5", "max_tokens": 8,
                           "messages": [{"role": "user", "content": "hi"}], "priority": "HIGH"}),
        ("/api/v1/batches/", {"feature": "x", "model": "claude-haiku-4-5", "priority": 1,
                              "items": [item("a")]}),
    ):  # fmt: skip
        answer = alice_client.post(path, body, format="json")
        assert answer.status_code == 400, answer.content
        assert answer.json()["code"] == "invalid_priority"
        assert answer.json()["detail"]["field"] == "priority"
    assert LlmJob.objects.count() == 0


def test_a_batchs_priority_is_every_jobs(alice_client: Any) -> None:
    batch = submit_batch(alice_client, [item("a"), item("b")], priority="low")
    priorities = set(
        LlmJob.objects.filter(batch_items__batch=batch).values_list("priority", flat=True)
    )
    assert priorities == {"low"}


def test_the_limiter_admits_a_waiting_high_job_before_the_normal_ones_of_its_feature(
    settings: Any,
) -> None:
    """Same model, same feature: the high job's line weighs LLM_PRIORITY_WEIGHT_FACTOR times
    more, so the next free slot is held back for it and the normal flood does not get it."""
    from tests.ratelimits.conftest import reserve

    settings.LLM_RATE_LIMIT_WINDOW_SECONDS = 2.0
    settings.LLM_RATE_LIMIT_MARGIN_SECONDS = 0.0
    settings.LLM_RATE_LIMIT_SLOW_START = False
    settings.LLM_FEATURE_WEIGHTS = {}
    normal_line, weights = limiter_line("summarize", "normal")
    high_line, high_weights = limiter_line("summarize", "high")
    assert normal_line == "summarize" and high_weights[high_line] == 10.0
    assert reserve(rpm=10, feature=normal_line, weights=weights)[0].admitted
    time.sleep(0.3)
    for _ in range(9):
        assert reserve(rpm=10, feature=normal_line, weights=weights)[0].admitted
    waiting, _ = reserve(
        rpm=10, feature=high_line, job="high-1", weights=high_weights, max_wait_ms=5000
    )
    assert waiting.status == 0
    time.sleep(waiting.ms / 1000 + 0.05)
    blocked, _ = reserve(rpm=10, feature=normal_line, weights=weights)
    assert blocked.reason == "share"
    assert reserve(rpm=10, feature=high_line, job="high-1", weights=high_weights)[0].admitted


def test_the_door_header_sets_the_jobs_priority() -> None:
    from gateway.headers import call_options

    assert call_options({"LLM-Priority": "High"}).job_fields()["priority"] == "high"
    assert "priority" not in call_options({}).job_fields()
