"""Approval, limits, cancel and the DLQ for agent runs, on real workers and the fake provider."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.models import AgentRun, AgentStep
from agents.sweep import agent_runs_resume
from alerts.models import Alert
from dlq.services import failure_requeue
from jobs.models import LlmJob
from tests.agents.conftest import call, detail, run_body, start_run
from tests.agents.tools import calls
from tests.conftest import _client_for, make_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def approval_run(client, agent_workers):
    body = run_body([call("echo", text="before"), call("guarded", note="send it")], "Finished.")
    run = start_run(client, body)
    agent_workers.drain()
    return run


def test_a_tool_that_needs_approval_pauses_the_run_alerts_and_runs_once_approved(
    alice_client, agent_workers, fake_provider
):
    run = approval_run(alice_client, agent_workers)
    result = detail(alice_client, run)
    assert result["status"] == "waiting_approval"
    (waiting,) = [s for s in result["steps"] if s["name"] == "guarded"]
    assert waiting["status"] == "waiting_approval"
    assert result["pending_approvals"] == [waiting["call_id"]]
    # Nothing of the turn ran while the run waits, and a WARNING alert went out.
    assert calls() == []
    (alert,) = Alert.objects.filter(source="agent_approval")
    assert alert.severity == "WARNING" and str(run.id) in alert.title
    assert alert.details["calls"][0]["call_id"] == waiting["call_id"]

    response = alice_client.post(
        f"/api/v1/agent-runs/{run.id}/approvals/{waiting['call_id']}/",
        {"approve": True, "reason": "looks right"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "running"
    agent_workers.drain()

    result = detail(alice_client, run)
    assert result["status"] == "completed" and result["output"]["text"] == "Finished."
    guarded = next(s for s in result["steps"] if s["name"] == "guarded")
    assert guarded["output"] == "guarded ran: send it" and not guarded["is_error"]
    assert sorted(c.split(":")[0] for c in calls()) == ["echo", "guarded"]
    again = alice_client.post(
        f"/api/v1/agent-runs/{run.id}/approvals/{waiting['call_id']}/",
        {"approve": True},
        format="json",
    )
    assert again.status_code == 409 and again.json()["code"] == "not_waiting_approval"


def test_a_rejected_call_gives_the_model_an_error_with_the_reason(
    alice_client, agent_workers, fake_provider
):
    run = approval_run(alice_client, agent_workers)
    call_id = detail(alice_client, run)["pending_approvals"][0]
    response = alice_client.post(
        f"/api/v1/agent-runs/{run.id}/approvals/{call_id}/",
        {"approve": False, "reason": "wrong customer"},
        format="json",
    )
    assert response.status_code == 200, response.content
    agent_workers.drain()

    result = detail(alice_client, run)
    assert result["status"] == "completed"
    guarded = next(s for s in result["steps"] if s["name"] == "guarded")
    assert guarded["is_error"] and guarded["output"] == "Rejected by a reviewer: wrong customer"
    assert [c.split(":")[0] for c in calls()] == ["echo"]  # the guarded tool never ran
    last_turn = AgentStep.objects.filter(run=run, kind="model").order_by("-index").first()
    results = last_turn.job.request_messages[-1]["content"]
    assert results[1]["is_error"] is True and "wrong customer" in results[1]["content"]


def test_a_run_waiting_past_the_approval_timeout_fails(
    alice_client, agent_workers, fake_provider, settings
):
    run = approval_run(alice_client, agent_workers)
    settings.LLM_AGENT_APPROVAL_TIMEOUT_SECONDS = 60
    assert agent_runs_resume().approvals_timed_out == 0  # not yet
    AgentRun.objects.filter(id=run.id).update(waiting_since=timezone.now() - timedelta(seconds=61))
    assert agent_runs_resume().approvals_timed_out == 1

    result = detail(alice_client, run)
    assert result["status"] == "failed" and result["error"]["code"] == "approval_timeout"
    assert next(s for s in result["steps"] if s["name"] == "guarded")["status"] == "cancelled"
    agent_workers.drain()
    assert calls() == []


def test_staff_with_the_approve_permission_decide_others_need_it(
    alice_client, bob_client, agent_workers, fake_provider
):
    run = approval_run(alice_client, agent_workers)
    call_id = detail(alice_client, run)["pending_approvals"][0]
    url = f"/api/v1/agent-runs/{run.id}/approvals/{call_id}/"
    assert bob_client.post(url, {"approve": True}, format="json").status_code == 404
    viewer = _client_for(make_user("viewer", "view_agentrun", is_staff=True))
    assert viewer.get(f"/api/v1/agent-runs/{run.id}/").status_code == 200
    assert viewer.post(url, {"approve": True}, format="json").status_code == 404
    approver = _client_for(make_user("approver", "approve_agentrun", is_staff=True))
    response = approver.post(url, {"approve": True}, format="json")
    assert response.status_code == 200, response.content
    bad = alice_client.post(url, {"approve": "perhaps"}, format="json")
    assert bad.status_code in (400, 409)


def test_max_turns_ends_the_run_without_running_the_last_turns_tools(
    alice_client, agent_workers, fake_provider
):
    body = run_body([call("echo", text="one")], [call("echo", text="two")], "never", max_turns=2)
    run = start_run(alice_client, body)
    agent_workers.drain()
    result = detail(alice_client, run)
    assert result["status"] == "failed" and result["error"]["code"] == "max_turns_exceeded"
    assert result["turns"] == 2
    assert [c.split(":")[0] for c in calls()] == ["echo"]  # turn 2's call never ran
    assert fake_provider.stats()["requests"] == 2


def test_a_turn_whose_worst_case_would_pass_max_cost_usd_is_not_sent(
    alice_client, agent_workers, fake_provider
):
    turns = [[call("echo", text="x" * 200)] for _ in range(20)]
    run = start_run(alice_client, run_body(*turns, "end", max_turns=25, max_cost_usd="0.15"))
    agent_workers.drain()
    result = detail(alice_client, run)
    assert result["status"] == "failed" and result["error"]["code"] == "max_cost_exceeded"
    assert 1 < result["turns"] < 21
    spent = sum(j.cost_usd for j in LlmJob.objects.all())
    assert Decimal(result["cost_usd"]) == spent <= Decimal("0.15")
    assert fake_provider.stats()["requests"] == result["turns"]


def test_a_max_cost_usd_below_the_first_turns_worst_case_is_refused(alice_client, fake_provider):
    response = alice_client.post(
        "/api/v1/agent-runs/", run_body("hi", max_cost_usd="0.000001"), format="json"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "max_cost_exceeded"
    assert response.json()["detail"]["field"] == "max_cost_usd"
    assert AgentRun.objects.count() == 0 and LlmJob.objects.count() == 0


def test_cancel_stops_a_queued_run_before_any_call_and_a_waiting_one_before_its_tool(
    alice_client, agent_workers, fake_provider
):
    queued = start_run(alice_client, run_body([call("echo")], "done"))
    response = alice_client.post(f"/api/v1/agent-runs/{queued.id}/cancel/")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"
    agent_workers.drain()
    assert fake_provider.stats()["requests"] == 0
    assert LlmJob.objects.get().status == "cancelled"

    waiting = approval_run(alice_client, agent_workers)
    response = alice_client.post(f"/api/v1/agent-runs/{waiting.id}/cancel/")
    assert response.status_code == 200
    agent_workers.drain()
    result = detail(alice_client, waiting)
    assert result["status"] == "cancelled"
    assert {s["status"] for s in result["steps"] if s["kind"] == "tool"} == {"cancelled"}
    assert calls() == []
    again = alice_client.post(f"/api/v1/agent-runs/{waiting.id}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "not_cancellable"


def test_cancel_of_a_running_turn_asks_its_worker_to_stop_and_no_step_follows(
    alice_client, agent_workers, fake_provider
):
    run = start_run(alice_client, run_body([call("echo")], "done"))
    job = LlmJob.objects.get()
    # The turn's job as a worker holds it mid-call.
    LlmJob.objects.filter(id=job.id).update(status="running", attempts=1)
    response = alice_client.post(f"/api/v1/agent-runs/{run.id}/cancel/")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    job.refresh_from_db()
    assert job.cancel_requested_at is not None  # the worker closes its stream (jobs/cancellation)
    agent_workers.drain()
    assert AgentStep.objects.filter(run=run, kind="tool").count() == 0


def test_a_dead_lettered_turn_fails_the_run_and_its_requeue_resumes_it(
    alice_client, agent_workers, fake_provider
):
    run = start_run(alice_client, run_body([call("add", a=1, b=1)], [call("echo")], "done"))
    agent_workers.llm.work_once()  # turn 1
    agent_workers.agents.work_once()  # its tool call, then turn 2 submitted
    fake_provider.faults({"400": 1.0})  # fatal: dead-lettered at once
    agent_workers.drain()
    result = detail(alice_client, run)
    assert result["status"] == "failed" and result["error"]["code"] == "invalid_request"
    first, second = (s.job for s in AgentStep.objects.filter(run=run, kind="model"))
    assert second.status == "failed"

    fake_provider.reset()
    assert failure_requeue(record=second.failures.get()) is True
    assert detail(alice_client, run)["status"] == "running"
    agent_workers.drain()

    result = detail(alice_client, run)
    assert result["status"] == "completed" and result["turns"] == 3
    first.refresh_from_db()
    assert first.attempts == 1  # the recorded turn was not paid again
    assert [c.split(":")[0] for c in calls()] == ["add", "echo"]  # each tool ran once


def _turn_worst_case(client, body) -> Decimal:
    """One turn's worst case, as the run prices it: a probe run's first job, cancelled unsent."""
    from ledger.services import job_upper_bound_cost

    probe = start_run(client, body)
    job = AgentStep.objects.get(run=probe, kind="model").job
    assert client.post(f"/api/v1/agent-runs/{probe.id}/cancel/").status_code == 200
    return job_upper_bound_cost(job=job)


def _ran_calls(fake_provider) -> int:
    return fake_provider.stats()["requests"]


@pytest.mark.parametrize("fault", ["timeout", "stall"])
def test_max_cost_usd_binds_every_attempt_of_a_turn_not_only_the_first(
    alice_client, agent_workers, fake_provider, fault
):
    """Issue 37, fault 2: a turn whose calls end of unknown outcome is retried only while its
    next attempt's worst case still fits what the run has left. A read timeout is booked at the
    attempt's whole upper bound: the retry cannot fit a cap of 1.05 worst cases, is never sent,
    and the run ends max_cost_exceeded. A stream that stalls mid-answer is booked at what it
    streamed (its input and the output it sent, a fraction of the bound): the retry fits and
    the run completes. Either way the run never passes its cap, checked against the bill."""
    body = run_body("Finished.", feature="capped-agent")
    worst = _turn_worst_case(alice_client, body)
    cap = (worst * Decimal("1.05")).quantize(Decimal("0.000001"))
    fake_provider.http.post("/_fake/faults", json={"next": [fault, fault, "ok"]})
    run = start_run(alice_client, {**body, "max_cost_usd": str(cap)})
    agent_workers.drain()
    result = detail(alice_client, run)
    job = AgentStep.objects.get(run=run, kind="model").job
    if fault == "timeout":
        assert result["status"] == "failed", result
        assert result["error"]["code"] == "max_cost_exceeded", result["error"]
        assert _ran_calls(fake_provider) == 1  # the retry would not fit: never sent
    else:
        # The stall is retried once (the retry table), and that retry's stall too would be
        # booked under the cap only if it fit: each attempt was checked before it was sent.
        assert result["status"] in ("completed", "failed"), result
        if result["status"] == "failed":
            assert result["error"]["code"] == "max_cost_exceeded", result["error"]
        assert _ran_calls(fake_provider) == job.attempts
    assert Decimal(result["cost_usd"]) <= cap
    billed = Decimal(fake_provider.stats()["billed"]["cost_usd"])
    # An unknown outcome is booked above its bill; each row is kept to the micro-dollar.
    assert billed <= Decimal(result["cost_usd"]) + Decimal("0.000001") * job.attempts


def test_max_cost_usd_holds_when_a_turn_falls_back_to_a_pricier_model(
    alice_client, agent_workers, fake_provider, settings
):
    """A turn on haiku that falls back to opus (five times its price) after two 529s: the opus
    attempt is priced at opus, does not fit the run's cap, and is never sent."""
    from features.services import feature_policy_update

    settings.LLM_FALLBACK_AFTER_ATTEMPTS = 2
    feature_policy_update(feature="capped-fallback", fallback_models=["claude-opus-4-6"])
    body = run_body("Finished.", feature="capped-fallback", model="claude-haiku-4-5")
    worst = _turn_worst_case(alice_client, body)
    cap = (worst * Decimal("1.5")).quantize(Decimal("0.000001"))
    fake_provider.http.post("/_fake/faults", json={"next": ["529", "529", "ok"]})
    run = start_run(alice_client, {**body, "max_cost_usd": str(cap)})
    agent_workers.drain()
    result = detail(alice_client, run)
    assert result["status"] == "failed" and result["error"]["code"] == "max_cost_exceeded"
    job = AgentStep.objects.get(run=run, kind="model").job
    assert job.run_model == "claude-opus-4-6" and job.attempts == 2
    assert _ran_calls(fake_provider) == 2  # the two 529s; opus was never called
    assert Decimal(result["cost_usd"]) == 0 <= cap
