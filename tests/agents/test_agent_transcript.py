"""A 50-turn run: the stored transcript grows linearly (each step keeps only what it adds, and a
turn's job only where its transcript is) and, with a cache breakpoint at the end of the previous
turn, most input tokens are cache reads from the third turn on."""

import json

import pytest

from agents.models import AgentStep
from agents.transcript import transcript
from jobs.models import LlmJob
from tests.agents.conftest import call, detail, run_body, start_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def test_a_50_turn_run_stores_a_linear_transcript_and_reads_most_input_from_the_cache(
    alice_client, agent_workers, fake_provider
):
    turns = [[call("echo", text=f"step {n}")] for n in range(1, 50)]
    run = start_run(alice_client, run_body(*turns, "fifty", max_turns=50))
    agent_workers.drain(rounds=400)

    result = detail(alice_client, run)
    assert result["status"] == "completed" and result["turns"] == 50, result["error"]
    steps = list(AgentStep.objects.filter(run=run).order_by("index").select_related("job"))
    assert len(steps) == 99

    # Linear: every step stores what it adds, a bounded number of bytes whatever its turn.
    sizes = [len(json.dumps([s.input, s.output])) for s in steps]
    assert max(sizes) < 400, max(sizes)
    first_half = sum(sizes[: len(sizes) // 2])
    assert sum(sizes) < 2.2 * first_half  # twice the turns, about twice the bytes
    # A turn's job row holds where its transcript is, not the transcript: bounded bytes per
    # turn (stored per turn, the 50 transcripts added up to the square of the run's length).
    rows = LlmJob.objects.filter(agent_step__run=run).values_list("messages", "messages_ref")
    stored = [len(json.dumps(row)) for row in rows]
    assert len(stored) == 50 and max(stored) < 200, stored
    assert all(messages == [] for messages, _ref in rows)
    # ...and the transcript built from the steps is what the last turn sent (without breakpoints):
    # read fresh from the database, its job rebuilds it from its reference.
    last_job = LlmJob.objects.get(id=steps[-1].job_id)
    assert last_job.messages_ref["before_step"] == steps[-1].index
    marker = ', "cache_control": {"type": "ephemeral"}'
    sent = json.loads(json.dumps(last_job.provider_request()["messages"]).replace(marker, ""))
    assert len(sent) == 1 + 2 * 49
    rebuilt = transcript(messages=run.messages, steps=steps[:-1])
    assert sent[1:] == rebuilt[1:]
    assert sent[0]["content"] == [{"type": "text", "text": rebuilt[0]["content"]}]

    # The cache: from turn 3 on, at least 80 % of the input tokens are cache reads.
    jobs = [s.job for s in steps if s.kind == "model"]
    later = jobs[2:]
    read = sum(j.cache_read_input_tokens for j in later)
    total = sum(
        j.input_tokens + j.cache_read_input_tokens + j.cache_creation_input_tokens for j in later
    )
    assert read / total >= 0.8, (read, total)
    ratios = [
        (j.input_tokens, j.cache_read_input_tokens, j.cache_creation_input_tokens) for j in jobs
    ]
    assert all(
        j.cache_read_input_tokens
        / (j.input_tokens + j.cache_read_input_tokens + j.cache_creation_input_tokens)
        >= 0.8
        for j in later
    ), ratios
    print(
        f"50 turns: step bytes min {min(sizes)} max {max(sizes)} total {sum(sizes)}; "
        f"turns 3-50 cache reads {read}/{total} = {read / total:.1%}; "
        f"job row bytes max {max(stored)}; turn 50 sent "
        f"{len(json.dumps(last_job.provider_request()['messages']))} bytes of messages"
    )
