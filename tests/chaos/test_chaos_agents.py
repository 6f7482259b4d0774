"""The drill's agent checks (``--agent-runs``) fail on what they look for: a run not final and
a tool call that started again after its completion was recorded."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agents.models import AgentRun, AgentStep
from chaos import DrillOptions
from chaos.agent_checks import agent_checks
from chaos.record import DrillRecord
from tests.agents.conftest import run_body, start_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_the_agent_checks_fail_on_a_run_not_final_and_a_call_started_after_its_completion(
    alice_client, tmp_path: Path
) -> None:
    done = start_run(alice_client, run_body("hi"))
    stuck = start_run(alice_client, run_body("hi"))
    finished = timezone.now() - timedelta(seconds=10)
    AgentRun.objects.filter(id=done.id).update(status="completed", finished_at=finished)
    AgentStep.objects.create(
        run=done, index=1, turn=1, kind="tool", name="echo", call_id="toolu_a",
        status="completed", output="x", attempts=1, finished_at=finished,
    )  # fmt: skip
    log = tmp_path / "agent-tool-calls.log"
    start = finished.timestamp()
    log.write_text(f"start toolu_a {start - 1:.6f}\ndone toolu_a {start - 0.5:.6f}\n")
    record = DrillRecord(
        options=DrillOptions(jobs=0, faults=frozenset(), agent_runs=2),
        phases=[], knobs=[], started_at=timezone.now(), database="test", redis="test",
        agent_run_ids=[str(done.id), str(stuck.id)], agent_tool_log=str(log),
    )  # fmt: skip

    runs_final, ran_again = agent_checks(record)
    assert not runs_final.passed and "1 queued" in runs_final.figures
    assert ran_again.passed and "0 started after it" in ran_again.figures

    with log.open("a") as more:  # the completed call starts again: what must never happen
        more.write(f"start toolu_a {start + 5:.6f}\n")
    assert not agent_checks(record)[1].passed
    assert "1 started after it (e.g. toolu_a)" in agent_checks(record)[1].figures
