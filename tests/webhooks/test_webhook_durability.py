"""At least once, on the real stack: `manage.py rqworker` processes as the Procfile runs them
(the llm worker, the default+alerts worker that delivers), the fake provider, MariaDB, Redis and
a real HTTP receiver.

- The alerts worker killed (-9) in the middle of a POST: the log row stays pending and claimed,
  the monitor's sweep sends it again, and the receiver gets the same ``LLM-Webhook-Id`` twice
  (the one duplicate at-least-once allows: the first attempt was received, its outcome never
  recorded).
- The llm worker killed (-9) after its job completed, and the delivery's RQ job gone from Redis
  before any alerts worker took it: the row, written with the job's completion, is the truth,
  and the sweep delivers it once.
"""

from typing import Any

import django_rq
import pytest

from jobs.models import LlmJob
from llmops.queues import ALERTS_QUEUE
from tests.conftest import FakeProvider, Workers, submit
from tests.jobs.test_reconciler import kill_process_tree
from tests.jobs.test_takeover import Processes, wait_for, worker_env
from tests.webhooks.helpers import receiver
from webhooks.models import WebhookDelivery
from webhooks.services import webhooks_resume

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


@pytest.fixture
def processes(tmp_path: Any) -> Any:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def _env(fake_provider: FakeProvider) -> dict[str, str]:
    return worker_env(
        fake_provider,
        CALLBACK_ALLOW_PRIVATE_HOSTS="True",
        LLM_RATE_LIMIT_ENABLED="False",
        WEBHOOK_TIMEOUT_SECONDS="60",
        LOG_LEVEL="WARNING",
    )


def _completed(job: LlmJob) -> bool:
    return LlmJob.objects.filter(id=job.id, status=LlmJob.Status.COMPLETED).exists()


def test_an_alerts_worker_killed_mid_delivery_leaves_it_to_the_sweep_and_it_arrives(
    alice_client, fake_provider, processes, settings
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    env = _env(fake_provider)
    with receiver(hang_first=True) as hook:
        processes.start(env, "rqworker", "llm", "--with-scheduler")
        alerts = processes.start(env, "rqworker", "default", "alerts", "--with-scheduler")
        job = submit(alice_client, callback_url=f"{hook.url}/done")
        try:
            first = hook.wait_for(1, seconds=60)[0]
        except AssertionError as error:
            raise AssertionError(f"{error}\n{processes.logs()}") from None
        assert _completed(job)
        kill_process_tree(alerts.pid)
        alerts.wait(timeout=10)
        hook.release()
        delivery = WebhookDelivery.objects.get(subject_id=str(job.id))
        # Claimed, never recorded: the attempt's outcome died with the worker.
        assert (delivery.state, delivery.attempts, delivery.history) == ("pending", 1, [])

        # The monitor's pass (its grace shortened from 300 s) sends it again.
        assert webhooks_resume(grace_seconds=0) == 1
        processes.start(env, "rqworker", "default", "alerts", "--with-scheduler")
        second = hook.wait_for(2, seconds=60)[1]
        wait_for(
            lambda: WebhookDelivery.objects.filter(id=delivery.id, state="delivered").exists(),
            timeout=30,
            what="the delivery recorded",
        )
    assert second["headers"]["LLM-Webhook-Id"] == first["headers"]["LLM-Webhook-Id"]
    assert second["raw"] == first["raw"]
    assert (first["headers"]["LLM-Webhook-Attempt"], second["headers"]["LLM-Webhook-Attempt"]) == (
        "1",
        "2",
    )
    delivery.refresh_from_db()
    assert delivery.attempts == 2 and [e["attempt"] for e in delivery.history] == [2]
    assert webhooks_resume(grace_seconds=0) == 0  # nothing pending: no third copy


def test_an_llm_worker_killed_after_completing_loses_no_delivery_even_when_redis_lost_its_job(
    alice_client, fake_provider, processes, settings
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    with receiver() as hook:
        llm = processes.start(_env(fake_provider), "rqworker", "llm", "--with-scheduler")
        job = submit(alice_client, callback_url=hook.url)
        wait_for(lambda: _completed(job), timeout=60, what=f"the job\n{processes.logs()}")
        kill_process_tree(llm.pid)
        llm.wait(timeout=10)
        # No alerts worker ran yet; the delivery's RQ job is lost with Redis's queue.
        django_rq.get_queue(ALERTS_QUEUE).empty()
        delivery = WebhookDelivery.objects.get(subject_id=str(job.id))
        assert (delivery.state, delivery.attempts) == ("pending", 0)
        Workers("alerts").drain()
        assert hook.requests == []

        assert webhooks_resume(grace_seconds=0) == 1
        Workers("alerts").drain()
        hook.wait_for(1)
        assert len(hook.requests) == 1
    assert hook.bodies[0]["type"] == "job.completed" and hook.bodies[0]["job"]["id"] == str(job.id)
    delivery.refresh_from_db()
    assert delivery.state == "delivered" and delivery.attempts == 1
