"""Agent runs calling an MCP server's tools, end to end: a real MCP server (the SDK's server
side, bearer auth), the fake provider scripting the model's tool calls, real RQ workers. Each
call goes through the agent step machinery: claimed, recorded once, its idempotency key the
step's call_id on every attempt."""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.models import AgentRun, AgentStep
from agents.sweep import agent_runs_resume
from alerts.models import Alert
from ledger.models import CostEntry
from llmops.queues import AGENTS_QUEUE
from mcp_tools.models import MCPServer
from tests.agents.conftest import (
    call,
    detail,
    run_body,
    start_run,
    wait_for,
)
from tests.jobs.test_reconciler import kill_process_tree
from tests.jobs.test_takeover import processes, worker_env  # noqa: F401 (fixture)
from tests.mcp_tools.conftest import TOKEN_ENV, register, start_mcp_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def tool_step(run: AgentRun, name: str) -> AgentStep:
    return AgentStep.objects.get(run=run, kind="tool", name=name)


def test_a_run_calls_an_mcp_tool_with_the_bearer_and_the_calls_idempotency_key(
    alice_client, agent_workers, mcp_server, mcp_token
):
    register("team", mcp_server.url)
    body = run_body([call("team__add", a=2, b=3)], "done", tools=["team__add", "calculator"])
    run = start_run(alice_client, body)
    agent_workers.drain()

    result = detail(alice_client, run)
    assert result["status"] == "completed", result
    step = tool_step(run, "team__add")
    assert step.status == "completed" and not step.is_error
    # Its text content, and its structured content (which says more than the text here).
    assert step.output == '5\n\nStructured content: {"result": 5}'
    assert step.attempts == 1
    # The server saw our bearer and, in the call's _meta, the step's call_id.
    ((tool, key, bearer),) = [c for c in mcp_server.calls() if c[1] == step.call_id]
    assert (tool, bearer) == ("add", f"Bearer {mcp_token}")
    assert key == step.call_id and key.startswith("toolu_")


def test_an_mcp_tool_error_is_an_error_result_and_the_run_goes_on(
    alice_client, agent_workers, mcp_server, mcp_token
):
    register("team", mcp_server.url)
    run = start_run(alice_client, run_body([call("team__broken")], "done", tools=["team__broken"]))
    agent_workers.drain()
    assert detail(alice_client, run)["status"] == "completed"
    step = tool_step(run, "team__broken")
    assert step.is_error and "broken" in step.output
    assert MCPServer.objects.get(name="team").consecutive_failures == 0  # it answered


def test_an_approval_gated_mcp_tool_waits_then_runs_once(
    alice_client, agent_workers, mcp_server, mcp_token
):
    register("team", mcp_server.url, "--approval", "notify")
    body = run_body(
        [call("team__notify", team="ops", text="deploy done")], "done", tools=["team__notify"]
    )
    run = start_run(alice_client, body)
    agent_workers.drain()
    assert detail(alice_client, run)["status"] == "waiting_approval"
    step = tool_step(run, "team__notify")
    assert step.status == "waiting_approval"
    assert not mcp_server.calls("notify") or all(c[1] != step.call_id for c in mcp_server.calls())

    response = alice_client.post(
        f"/api/v1/agent-runs/{run.id}/approvals/{step.call_id}/", {"approve": True}, format="json"
    )
    assert response.status_code == 200, response.content
    agent_workers.drain()

    assert detail(alice_client, run)["status"] == "completed"
    step.refresh_from_db()
    assert step.output.startswith("sent to ops: deploy done") and step.attempts == 1
    assert [c[1] for c in mcp_server.calls("notify")].count(step.call_id) == 1
    assert mcp_server.effects(step.call_id) == ["sent to ops: deploy done"]


def test_a_worker_killed_mid_call_the_run_completes_and_the_side_effect_happened_once(
    alice_client,
    agent_workers,
    fake_provider,
    mcp_server,
    mcp_token,
    processes,  # noqa: F811
    settings,
):
    settings.LLM_STALE_AFTER_SECONDS = 1.0
    settings.LLM_LOST_QUEUE_GRACE_SECONDS = 0.0
    register("team", mcp_server.url)
    body = run_body(
        [call("team__notify", team="ops", text="once", seconds=3)], "done", tools=["team__notify"]
    )
    run = start_run(alice_client, body)
    agent_workers.llm.work_once()  # turn 1: the call, its task on the agents queue
    env = worker_env(fake_provider, **{TOKEN_ENV: mcp_token, "LLM_HEARTBEAT_SECONDS": "1"})
    worker = processes.start(env, "rqworker", AGENTS_QUEUE, "--burst")
    step = tool_step(run, "team__notify")
    wait_for(lambda: any(c[1] == step.call_id for c in mcp_server.calls()), seconds=60)
    kill_process_tree(worker.pid)  # mid-call: the server is still sleeping on it
    step.refresh_from_db()
    assert step.status == "running" and step.attempts == 1

    # Its lease lapses (fast-forwarded), the sweep takes it back and it runs again.
    AgentStep.objects.filter(id=step.id).update(lease_until=timezone.now() - timedelta(seconds=5))
    time.sleep(1.5)  # the dead worker's heartbeat goes stale
    report = agent_runs_resume()
    assert report.calls_taken_back == 1 and report.tasks_enqueued == 1
    agent_workers.drain()

    assert detail(alice_client, run)["status"] == "completed"
    step.refresh_from_db()
    assert step.attempts == 2 and step.output.startswith("sent to ops: once")
    # Both attempts carried the same key; the server kept the side effect once.
    assert [c[1] for c in mcp_server.calls("notify")].count(step.call_id) == 2
    assert mcp_server.effects(step.call_id) == ["sent to ops: once"]


def test_a_server_that_went_down_gives_an_error_result_the_run_ends_and_an_alert_is_raised(
    alice_client, agent_workers, mcp_token, settings, tmp_path
):
    settings.LLM_MCP_ALERT_AFTER_FAILURES = 1
    gone = start_mcp_server(tmp_path)
    register("gone", gone.url)
    gone.stop()
    run = start_run(
        alice_client, run_body([call("gone__add", a=1, b=1)], "done", tools=["gone__add"])
    )
    agent_workers.drain()

    assert detail(alice_client, run)["status"] == "completed"
    step = tool_step(run, "gone__add")
    assert step.is_error and step.output.startswith("MCP server gone: the server cannot be reached")
    server = MCPServer.objects.get(name="gone")
    assert server.consecutive_failures == 1 and "cannot be reached" in server.last_error
    alert = Alert.objects.get(source="mcp_server")
    assert alert.severity == "WARNING" and "gone" in alert.title


def test_a_priced_call_is_booked_on_its_turn_and_counted_in_the_runs_cost(
    alice_client, agent_workers, mcp_server, mcp_token
):
    register("paid", mcp_server.url, "--price", "0.25")
    run = start_run(
        alice_client, run_body([call("paid__add", a=1, b=2)], "done", tools=["paid__add"])
    )
    agent_workers.drain()

    assert detail(alice_client, run)["status"] == "completed"
    (row,) = CostEntry.objects.filter(entry_type="tool_call")
    step = tool_step(run, "paid__add")
    assert row.cost_usd == Decimal("0.25") and row.request_id == step.call_id
    assert row.model == "paid__add" and row.provider == "mcp:paid" and row.job.agent_step.turn == 1
    run.refresh_from_db()
    turns = sum(s.job.cost_usd for s in AgentStep.objects.filter(run=run, kind="model"))
    provider_cost = sum(
        CostEntry.objects.filter(job__agent_step__run=run, entry_type="attempt").values_list(
            "cost_usd", flat=True
        )
    )
    assert run.cost_usd == turns == provider_cost + Decimal("0.25")


def test_a_priced_call_over_the_runs_max_cost_is_not_made(
    alice_client, agent_workers, mcp_server, mcp_token
):
    register("paid", mcp_server.url, "--price", "0.25")
    body = run_body(
        [call("paid__add", a=40, b=2)], "done", tools=["paid__add"], max_cost_usd="0.10"
    )
    run = start_run(alice_client, body)
    agent_workers.drain()

    step = tool_step(run, "paid__add")
    assert step.is_error and step.output.startswith("Not called: paid__add costs $0.25")
    assert not any(c[1] == step.call_id for c in mcp_server.calls())
    assert not CostEntry.objects.filter(entry_type="tool_call").exists()


def test_a_slow_server_gives_an_error_result_at_its_timeout_and_the_run_goes_on(
    alice_client, agent_workers, mcp_server, mcp_token
):
    register("slow", mcp_server.url, "--timeout", "1")
    body = run_body(
        [call("slow__notify", team="ops", text="late", seconds=10)], "done", tools=["slow__notify"]
    )
    run = start_run(alice_client, body)
    started = time.monotonic()
    agent_workers.drain()

    assert time.monotonic() - started < 10  # the run did not wait for the tool's end
    assert detail(alice_client, run)["status"] == "completed"
    step = tool_step(run, "slow__notify")
    # the call itself ended at the server's timeout (1 s), however slow the machine around it
    assert 1 <= (step.finished_at - step.started_at).total_seconds() < 5
    assert step.is_error and "no answer within its timeout (1 s)" in step.output
    assert MCPServer.objects.get(name="slow").consecutive_failures == 1


def test_a_401_gives_an_error_result_that_never_says_the_token(
    alice_client, agent_workers, mcp_server, mcp_token, monkeypatch
):
    register("team", mcp_server.url)
    monkeypatch.setenv(TOKEN_ENV, "a-revoked-token")  # the token was rotated on the server
    body = run_body([call("team__add", a=1, b=1)], "done", tools=["team__add"])
    run = start_run(alice_client, body)
    agent_workers.drain()

    assert detail(alice_client, run)["status"] == "completed"
    step = tool_step(run, "team__add")
    assert step.is_error and "HTTP 401" in step.output and "a-revoked-token" not in step.output
    assert not any(c[1] == step.call_id for c in mcp_server.calls())
