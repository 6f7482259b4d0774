"""The next step starts exactly once, even if the completion of a step is heard twice at once;
and what a step's completion costs in statements."""

import threading

import pytest
from django.db import close_old_connections, connection, transaction
from django.test.utils import CaptureQueriesContext

from jobs.models import LlmJob
from jobs.services import SuccessResult, job_claim, job_complete
from jobs.transitions import Transition
from pipelines.services import pipeline_job_transition
from tests.conftest import submit
from tests.pipelines.helpers import create_pipeline, three_steps

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

USAGE = {
    "input_tokens": 5,
    "output_tokens": 7,
    "cache_write_5m_tokens": 0,
    "cache_write_1h_tokens": 0,
    "cache_read_tokens": 0,
}


def complete(job: LlmJob) -> LlmJob:
    job_claim(job_id=str(job.id))
    result = SuccessResult("an answer", "end_turn", USAGE, 200, "req_1", 10)
    completed = job_complete(job_id=job.id, attempt=1, result=result)
    assert completed is not None
    return completed


def test_two_copies_of_a_completion_at_once_start_the_next_step_once(alice_client):
    pipeline = create_pipeline(alice_client, three_steps())
    first = complete(pipeline.steps.get(index=0).job)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def hear_it_again() -> None:
        try:
            barrier.wait(timeout=10)
            with transaction.atomic():
                pipeline_job_transition(first, Transition.COMPLETED)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=hear_it_again) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    second = pipeline.steps.get(index=1)
    assert second.job is not None
    # The completion itself started step 1; neither copy started another job.
    assert LlmJob.objects.count() == 2
    assert pipeline.steps.get(index=2).job is None


@pytest.mark.django_db  # no worker, no commit needed: the test's transaction is enough
def test_what_a_completion_costs_in_and_out_of_a_pipeline(alice_client):
    plain = submit(alice_client)
    job_claim(job_id=str(plain.id))
    pipeline = create_pipeline(alice_client, three_steps())
    step_job = pipeline.steps.get(index=0).job
    job_claim(job_id=str(step_job.id))
    result = SuccessResult("an answer", "end_turn", USAGE, 200, "req_1", 10)

    with CaptureQueriesContext(connection) as outside:
        job_complete(job_id=plain.id, attempt=1, result=result)
    with CaptureQueriesContext(connection) as inside:
        job_complete(job_id=step_job.id, attempt=1, result=result)

    assert not [q for q in outside if "pipelines_" in q["sql"]]
    extra = len(inside) - len(outside)
    # Step lookup, pipeline lock, next step lock, the user, the next step's job submit (its
    # price, budgets, insert, counters) and the step's update: 10 when measured, whatever the
    # pipeline's length.
    print(f"completion: {len(outside)} statements alone, {len(inside)} as a step (+{extra})")
    assert extra <= 12
