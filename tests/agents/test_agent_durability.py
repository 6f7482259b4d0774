"""A run survives what kills workers and empties Redis: a worker killed with -9 during a tool
call and during a model turn, and Redis flushed mid-run. Completed tool calls never run again,
recorded turns are never paid again; an interrupted call runs again with the same call_id."""

import time
from datetime import timedelta
from decimal import Decimal

import django_rq
import pytest
from django.utils import timezone

from agents.models import AgentRun, AgentStep
from agents.sweep import agent_runs_resume
from jobs.models import LlmJob
from jobs.reconciler import reconcile_jobs
from ledger.models import CostEntry
from llmops.queues import AGENTS_QUEUE, LLM_QUEUE
from tests.agents.conftest import TEST_TOOL_MODULES, call, detail, run_body, start_run, wait_for
from tests.agents.tools import calls
from tests.jobs.test_reconciler import kill_process_tree
from tests.jobs.test_takeover import processes, worker_env  # noqa: F401 (fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.fixture
def quick_recovery(settings):
    """A dead worker is noticed in a second, a lost task at once (production: 45 s, 30 s)."""
    settings.LLM_STALE_AFTER_SECONDS = 1.0
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0.0


def _env(fake_provider):
    return worker_env(
        fake_provider,
        LLM_AGENT_TOOL_MODULES=TEST_TOOL_MODULES,
        LLM_HEARTBEAT_SECONDS="1",
        LLM_RATE_LIMIT_ENABLED="False",
    )


def tool_step(run: AgentRun, name: str) -> AgentStep:
    return AgentStep.objects.get(run=run, kind="tool", name=name)


def test_a_worker_killed_during_a_tool_call_the_run_completes_and_completed_calls_ran_once(
    alice_client,
    agent_workers,
    fake_provider,
    processes,  # noqa: F811
    quick_recovery,
):
    body = run_body([call("add", a=1, b=2), call("slow_effect", seconds=3)], "done")
    run = start_run(alice_client, body)
    agent_workers.llm.work_once()  # turn 1: two tool calls, their task on the agents queue
    worker = processes.start(_env(fake_provider), "rqworker", AGENTS_QUEUE, "--burst")
    wait_for(
        lambda: tool_step(run, "add").status == "completed"
        and any(c.startswith("slow_effect:start") for c in calls()),
        seconds=60,
    )
    kill_process_tree(worker.pid)  # mid-call: slow_effect started, not finished
    slow = tool_step(run, "slow_effect")
    assert slow.status == "running" and slow.attempts == 1

    # Its lease lapses (fast-forwarded: the tool's timeout is 30 s), the sweep takes it back.
    AgentStep.objects.filter(id=slow.id).update(lease_until=timezone.now() - timedelta(seconds=5))
    time.sleep(1.5)  # the dead worker's heartbeat goes stale
    report = agent_runs_resume()
    assert report.calls_taken_back == 1 and report.tasks_enqueued == 1
    agent_workers.drain()

    result = detail(alice_client, run)
    assert result["status"] == "completed", result
    slow.refresh_from_db()
    assert slow.attempts == 2 and slow.status == "completed" and slow.output == "done"
    add = tool_step(run, "add")
    # The completed call ran once; the interrupted one ran again with the same call_id.
    assert calls().count(f"add:{add.call_id}") == 1
    assert calls().count(f"slow_effect:start:{slow.call_id}") == 2
    assert calls().count(f"slow_effect:{slow.call_id}") == 1
    assert add.attempts == 1


def test_a_worker_killed_during_a_model_turn_the_run_completes_and_recorded_turns_paid_once(
    alice_client,
    agent_workers,
    fake_provider,
    processes,  # noqa: F811
    quick_recovery,
):
    run = start_run(alice_client, run_body([call("add", a=2, b=3)], [call("echo")], "done"))
    agent_workers.llm.work_once()  # turn 1 recorded
    agent_workers.agents.work_once()  # its tool call; turn 2 submitted
    second = LlmJob.objects.get(agent_step__run=run, agent_step__turn=2)
    # Turn 2's first call takes 4 s at the provider: long enough to kill its worker mid-call.
    fake_provider.http.post(
        "/_fake/faults",
        json={"next": [{"answer": "ok", "latency_ms": 4000}], "key": str(second.id)},
    ).raise_for_status()
    worker = processes.start(_env(fake_provider), "rqworker", LLM_QUEUE, "--burst")
    wait_for(lambda: LlmJob.objects.get(id=second.id).status == "running", seconds=60)
    time.sleep(0.5)
    kill_process_tree(worker.pid)

    # The jobs reconciler recovers the turn once its heartbeat and lock have lapsed.
    wait_for(lambda: reconcile_jobs().recovered_stale, seconds=30, every=0.5)
    agent_workers.drain()

    result = detail(alice_client, run)
    assert result["status"] == "completed", result
    turns = [s.job for s in AgentStep.objects.filter(run=run, kind="model").select_related("job")]
    assert len(turns) == 3
    first, second, third = turns
    assert first.attempts == 1 and third.attempts == 1  # recorded turns were not called again
    assert second.attempts == 2  # the killed attempt, then its retry
    # Every turn paid for its answer once; the killed attempt is booked as an unknown outcome.
    for job in turns:
        outcomes = list(
            CostEntry.objects.filter(job=job, entry_type="attempt").values_list(
                "outcome", flat=True
            )
        )
        assert outcomes.count("success") == 1, (job, outcomes)
    assert [c.split(":")[0] for c in calls()] == ["add", "echo"]
    assert result["cost_usd"] == f"{sum(j.cost_usd for j in turns):.6f}"


def test_a_redis_flush_mid_run_is_resumed_by_the_sweep_and_the_reconciler(
    alice_client, agent_workers, fake_provider, quick_recovery
):
    run = start_run(alice_client, run_body([call("add", a=1, b=1)], [call("echo")], "done"))
    agent_workers.llm.work_once()  # turn 1; its tool task waits on the agents queue
    connection = django_rq.get_connection(AGENTS_QUEUE)
    connection.flushdb()  # the tool task is gone
    agent_workers.drain()
    assert AgentRun.objects.get(id=run.id).status == "running"  # nothing left to run it

    report = agent_runs_resume()
    assert report.tasks_enqueued == 1
    agent_workers.agents.work_once()  # the tool call; turn 2's job is queued
    ran = calls()  # the tests' own count lives in Redis too
    connection.flushdb()  # turn 2's RQ job is gone: the jobs reconciler's part
    assert reconcile_jobs().requeued_lost == 1
    agent_workers.drain()

    result = detail(alice_client, run)
    assert result["status"] == "completed" and result["turns"] == 3
    assert [c.split(":")[0] for c in ran + calls()] == ["add", "echo"]
    assert fake_provider.stats()["requests"] == 3


def test_cancel_of_a_run_mid_turn_closes_the_turns_stream_and_books_it_to_the_run(
    alice_client,
    fake_provider,
    processes,  # noqa: F811
):
    # 20,000 tokens at 1,000 a second: a turn that streams for 20 s.
    fake_provider.http.post(
        "/_fake/faults", json={"stream_tokens_per_second": 1000}
    ).raise_for_status()
    body = run_body(
        max_tokens=20_000,
        messages=[{"role": "user", "content": "Write the report. fake_output_tokens=20000"}],
    )
    run = start_run(alice_client, body)
    job = LlmJob.objects.get()
    processes.start(_env(fake_provider), "rqworker", LLM_QUEUE, "--burst")
    wait_for(
        lambda: len(
            (alice_client.get(f"/api/v1/jobs/{job.id}/").json()["output"] or {}).get("partial_text")
            or ""
        )
        > 2000,
        seconds=60,
    )
    asked = time.monotonic()
    response = alice_client.post(f"/api/v1/agent-runs/{run.id}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    wait_for(lambda: LlmJob.objects.get(id=job.id).status == "cancelled", seconds=10)
    assert time.monotonic() - asked < 5
    (entry,) = CostEntry.objects.filter(job=job)
    assert entry.outcome == "cancelled" and entry.is_estimated  # up to max_tokens: its bound
    result = detail(alice_client, run)
    assert result["steps"][0]["status"] == "cancelled" and result["turns"] == 1
    assert Decimal(result["cost_usd"]) == LlmJob.objects.get(id=job.id).cost_usd > 0
