"""Agent runs through real workers (both queues), the real fake provider over HTTP, MariaDB and
Redis: turns, parallel tool calls, the transcript each turn sends, errors of tools, limits."""

from datetime import timedelta
from decimal import Decimal

import pytest

from agents.models import AgentRun, AgentStep
from jobs.models import LlmJob
from tests.agents.conftest import call, detail, run_body, start_run
from tests.agents.tools import calls

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def turn_jobs(run: AgentRun) -> list[LlmJob]:
    return [
        s.job
        for s in AgentStep.objects.filter(run=run, kind="model").select_related("job")
        if s.job
    ]


def test_a_five_turn_run_with_parallel_tool_calls_completes_with_the_right_transcript(
    alice_client, agent_workers, fake_provider
):
    body = run_body(
        [call("add", a=1, b=2), call("echo", text="hello"), call("add", a=10, b=20)],
        [call("echo", text="second")],
        [call("add", a=5, b=5), call("add", a=6, b=6)],
        [call("echo", text="fourth")],
        "All done: 3, hello, 30, second, 10, 12, fourth.",
    )
    run = start_run(alice_client, body)
    assert run.status == "queued" and run.turns == 1

    agent_workers.drain()

    result = detail(alice_client, run)
    assert result["status"] == "completed", result
    assert result["turns"] == 5
    assert result["output"]["text"] == "All done: 3, hello, 30, second, 10, 12, fourth."
    assert result["error"] is None and result["pending_approvals"] == []
    kinds = [(s["kind"], s["name"]) for s in result["steps"]]
    assert kinds == [
        ("model", ""),
        ("tool", "add"),
        ("tool", "echo"),
        ("tool", "add"),
        ("model", ""),
        ("tool", "echo"),
        ("model", ""),
        ("tool", "add"),
        ("tool", "add"),
        ("model", ""),
        ("tool", "echo"),
        ("model", ""),
    ]
    assert [s["index"] for s in result["steps"]] == list(range(12))
    tool_outputs = [s["output"] for s in result["steps"] if s["kind"] == "tool"]
    assert tool_outputs == [
        '{"sum": 3}',
        "hello",
        '{"sum": 30}',
        "second",
        '{"sum": 10}',
        '{"sum": 12}',
        "fourth",
    ]
    assert all(s["status"] == "completed" and not s["is_error"] for s in result["steps"])
    # Every tool call ran exactly once.
    assert sorted(calls()) == sorted(
        f"{s['name']}:{s['call_id']}" for s in result["steps"][1:] if s["kind"] == "tool"
    )

    # What the last turn sent: the first message, then per turn the assistant's content and one
    # user message with every result in the model's order, breakpoints on the previous
    # prompt's end and on this one's.
    jobs = turn_jobs(run)
    assert len(jobs) == 5 and all(j.status == "completed" and j.attempts == 1 for j in jobs)
    last = jobs[-1].request_messages
    assert len(last) == 1 + 2 * 4
    assert [m["role"] for m in last] == ["user"] + ["assistant", "user"] * 4
    first_results = last[2]["content"]
    assert [b["type"] for b in first_results] == ["tool_result"] * 3
    assert [b["tool_use_id"] for b in first_results] == [s["call_id"] for s in result["steps"][1:4]]
    assert [b["content"] for b in first_results] == ['{"sum": 3}', "hello", '{"sum": 30}']
    assert last[1]["content"] == result["steps"][0]["output"]
    marked = [
        i
        for i, m in enumerate(last)
        if isinstance(m["content"], list) and "cache_control" in m["content"][-1]
    ]
    assert marked == [6, 8]
    # Each turn's job names the run.
    assert all(j.metadata["llmops_agent_run"]["id"] == str(run.id) for j in jobs)
    assert [j.metadata["llmops_agent_run"]["turn"] for j in jobs] == [1, 2, 3, 4, 5]
    assert Decimal(result["cost_usd"]) == sum(j.cost_usd for j in jobs) > 0
    assert fake_provider.stats()["requests"] == 5


def test_a_tool_that_raises_times_out_refuses_or_gets_bad_input_gives_the_model_an_error(
    alice_client, agent_workers, fake_provider
):
    body = run_body(
        [
            call("explode"),
            call("refuse"),
            call("sleepy", seconds=3),
            call("add", a="one", b=2),
            call("not_a_tool"),
            call("echo", text="fine"),
        ],
        "Handled.",
    )
    run = start_run(alice_client, body)
    agent_workers.drain()

    result = detail(alice_client, run)
    assert result["status"] == "completed", result
    tools = {s["name"]: s for s in result["steps"] if s["kind"] == "tool"}
    assert tools["explode"]["is_error"] and "the tool broke" in tools["explode"]["output"]
    assert tools["refuse"]["is_error"] and tools["refuse"]["output"] == "not today"
    assert tools["sleepy"]["is_error"] and "Timed out after 1 s" in tools["sleepy"]["output"]
    assert tools["add"]["is_error"] and "Invalid input at a" in tools["add"]["output"]
    assert tools["not_a_tool"]["is_error"]
    assert tools["not_a_tool"]["output"] == "Unknown tool: not_a_tool"
    assert not tools["echo"]["is_error"] and tools["echo"]["output"] == "fine"
    # The results went back with is_error, and the model answered.
    last = turn_jobs(run)[-1].request_messages[-1]["content"]
    assert [b.get("is_error", False) for b in last] == [True, True, True, True, True, False]
    assert "add:" not in " ".join(calls())  # schema-invalid input never reached the tool


def test_a_turn_starts_at_its_first_claim_and_keeps_that_start_through_a_retry(
    alice_client, agent_workers, fake_provider, settings
):
    settings.LLM_RETRY_DELAY_SCALE = 0.0
    settings.LLM_RETRY_JITTER = 0.0
    fake_provider.faults({"529": 1.0})
    run = start_run(alice_client, run_body([call("add", a=1, b=2)], "3."))
    (first,) = AgentStep.objects.filter(run=run, kind="model")
    assert first.started_at is None  # submitted, not yet claimed

    agent_workers.llm.work_once()  # the first attempt: claimed, then a 529
    first.refresh_from_db()
    job = LlmJob.objects.get(id=first.job_id)
    run.refresh_from_db()
    assert job.status == "retrying" and run.status == "running"
    started = first.started_at
    # Set in the claim's transaction, just after the job's own start.
    assert started is not None and timedelta(0) <= started - job.started_at < timedelta(seconds=5)

    fake_provider.reset()
    agent_workers.drain()
    run.refresh_from_db()
    first.refresh_from_db()
    job.refresh_from_db()
    assert run.status == "completed" and job.attempts == 2
    assert first.started_at == started  # the retry's claim leaves the turn's start alone
    second = AgentStep.objects.get(run=run, kind="model", turn=2)
    tool = AgentStep.objects.get(run=run, kind="tool")
    assert tool.finished_at <= second.started_at <= second.finished_at
