"""/healthz and /readyz: liveness touches nothing; readiness checks the database, Redis and a live
rq worker on the llm queue, and answers within two seconds whatever is down.

Real pieces only: `manage.py rqworker` processes, a Redis that does not answer (a socket that
accepts and never replies, the worst case: no refusal to fail fast on), a database behind a TCP
forwarder that is cut (tests/netcut.py) and one that never answers its handshake.
"""

import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import django_rq
import httpx
import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from rq import Worker
from rq.utils import utcformat
from rq.worker import WorkerStatus

from llmops.env import database_url
from llmops.queues import DEFAULT_QUEUE, LLM_QUEUE
from ops.health import READY_DEADLINE_SECONDS
from tests.conftest import FakeProvider
from tests.jobs.test_reconciler import _env_for_subprocess
from tests.jobs.test_takeover import Processes, wait_for, worker_env
from tests.netcut import NetCut
from tests.ops.test_logs import llm_workers, parse_every_line, start_web, stop

ANSWER_WITHIN_SECONDS = 2.0


def readyz(client: Client | None = None) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    response = (client or Client()).get("/readyz")
    return response.status_code, response.json(), time.monotonic() - started


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never says a word."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        yield listener.getsockname()[1]


def point_redis_at(settings: Any, port: int) -> None:
    queues = {name: dict(config) for name, config in settings.RQ_QUEUES.items()}
    queues[LLM_QUEUE]["URL"] = f"redis://127.0.0.1:{port}/0"
    settings.RQ_QUEUES = queues


# --- Liveness -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_answers_healthz_without_a_database_query(django_assert_num_queries):
    with django_assert_num_queries(0):
        response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-store" in response.headers["Cache-Control"]


@pytest.mark.django_db
def test_it_answers_healthz_and_readyz_to_anyone_but_only_for_get_and_head():
    # No session, token or CSRF cookie is needed to ask.
    strict = Client(enforce_csrf_checks=True)
    assert strict.get("/healthz").status_code == 200
    assert strict.head("/healthz").status_code == 200
    assert strict.get("/readyz").status_code in (200, 503)
    assert Client().post("/healthz").status_code == 405
    assert Client().post("/readyz").status_code == 405


# --- Readiness ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_readyz_is_503_without_an_llm_worker_even_with_a_worker_on_another_queue(spawned):
    other = spawned.start(_env_for_subprocess(), "rqworker", DEFAULT_QUEUE)
    wait_for(
        lambda: Worker.count(queue=django_rq.get_queue(DEFAULT_QUEUE)) >= 1,
        timeout=30,
        what="the default worker to register",
    )
    status, body, _ = readyz()
    assert status == 503
    assert body["status"] == "not_ready"
    assert body["checks"]["database"]["ok"] and body["checks"]["redis"]["ok"]
    assert body["checks"]["llm_workers"] == {
        "ok": False,
        "count": 0,
        "ms": body["checks"]["llm_workers"]["ms"],
    }
    assert "no-store" in Client().get("/readyz").headers["Cache-Control"]
    stop(other)


@pytest.mark.django_db(transaction=True)
def test_readyz_is_200_with_a_real_llm_worker_idle_or_not_and_503_once_it_stops(
    fake_provider: FakeProvider, spawned: Processes
):
    worker = spawned.start(worker_env(fake_provider), "rqworker", LLM_QUEUE, "--with-scheduler")
    wait_for(lambda: readyz()[0] == 200, timeout=30, what=f"ready\n{spawned.logs()}")
    # Then in its loop: rq registers a worker before it starts the scheduler and installs its
    # signal handlers, and a SIGTERM in between (a loaded machine) ends it without unregistering.
    wait_for(
        lambda: [w.get_state() for w in Worker.all(queue=django_rq.get_queue(LLM_QUEUE))]
        == [WorkerStatus.IDLE],
        timeout=30,
        what=f"the worker idle in its loop\n{spawned.logs()}",
    )
    status, body, _ = readyz()
    assert body["status"] == "ready"
    assert {name: check["ok"] for name, check in body["checks"].items()} == {
        "database": True,
        "redis": True,
        "llm_workers": True,
    }
    assert body["checks"]["llm_workers"]["count"] == 1
    assert all(check["ms"] >= 0 for check in body["checks"].values())

    # An idle worker heartbeats once per blocking dequeue: `worker_ttl - 15` = 405 s apart with
    # django-rq's default. Its key's expiry, not the heartbeat's age, says it is alive.
    redis = django_rq.get_connection(LLM_QUEUE)
    (registered,) = Worker.all(queue=django_rq.get_queue(LLM_QUEUE))
    long_ago = timezone.now() - timedelta(seconds=400)
    redis.hset(registered.key, "last_heartbeat", utcformat(long_ago))
    assert redis.ttl(registered.key) > 400
    assert readyz()[0] == 200

    # A warm shutdown unregisters the worker at once.
    stop(worker)
    status, body, _ = readyz()
    assert status == 503 and body["checks"]["llm_workers"]["count"] == 0


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_key_expired_is_not_counted(fake_provider, spawned):
    """What rq leaves of a worker killed with -9: its id in the queue's worker set, then (once
    the key's expiry passes with no heartbeat) no key."""
    spawned.start(worker_env(fake_provider), "rqworker", LLM_QUEUE)
    wait_for(lambda: readyz()[0] == 200, timeout=30, what=f"ready\n{spawned.logs()}")
    (registered,) = Worker.all(queue=django_rq.get_queue(LLM_QUEUE))
    spawned.stop_all()  # kill -9: no death is registered
    redis = django_rq.get_connection(LLM_QUEUE)
    assert redis.exists(registered.key)
    assert readyz()[0] == 200  # rq's own rule: alive until the key expires
    redis.delete(registered.key)
    status, body, _ = readyz()
    assert status == 503 and body["checks"]["llm_workers"]["count"] == 0


@pytest.mark.quiet  # a time a probe sees: no other test's load beside it
@pytest.mark.django_db
def test_readyz_is_503_within_two_seconds_when_redis_does_not_answer(settings, silent_port):
    point_redis_at(settings, silent_port)
    status, body, elapsed = readyz()
    assert status == 503 and body["status"] == "not_ready"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["redis"] == {
        "ok": False,
        "error": "TimeoutError",
        "ms": body["checks"]["redis"]["ms"],
    }
    assert body["checks"]["llm_workers"]["ok"] is False
    assert "count" not in body["checks"]["llm_workers"]  # unknown, not zero
    assert elapsed < ANSWER_WITHIN_SECONDS, elapsed


# A CI run under five workers' load took 1.9 s (0.3-0.4 s alone): the time is the probe's.
@pytest.mark.quiet  # a time a probe sees: no other test's load beside it
@pytest.mark.django_db
def test_readyz_is_503_at_once_when_redis_refuses(settings):
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    point_redis_at(settings, port)
    status, body, elapsed = readyz()
    assert status == 503
    assert body["checks"]["redis"]["error"] == "ConnectionError"
    assert elapsed < 1.0, elapsed


@pytest.mark.django_db
def test_readyz_detail_names_no_secret(settings, silent_port):
    queues = {name: dict(config) for name, config in settings.RQ_QUEUES.items()}
    queues[LLM_QUEUE]["URL"] = f"redis://:hunter2-secret@127.0.0.1:{silent_port}/0"
    settings.RQ_QUEUES = queues
    response = Client().get("/readyz")
    assert response.status_code == 503
    text = response.content.decode()
    assert "hunter2" not in text and str(silent_port) not in text and "127.0.0.1" not in text


def _web_env(database_port: int) -> dict[str, str]:
    env = _env_for_subprocess()
    db = connection.settings_dict
    env["DATABASE_URL"] = database_url(db, host="127.0.0.1", port=database_port)
    return env


def _get(base: str, path: str) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    response = httpx.get(f"{base}{path}", timeout=10)
    return response.status_code, response.json(), time.monotonic() - started


@pytest.mark.quiet  # a time a probe sees: no other test's load beside it
@pytest.mark.django_db(transaction=True)
def test_a_web_process_cut_off_from_its_database_is_not_ready_but_alive(spawned, fake_provider):
    """uvicorn as the Procfile runs it, reaching MariaDB through a forwarder that is cut."""
    db = connection.settings_dict
    with NetCut(db["HOST"], int(db["PORT"])) as database:
        web = start_web(spawned, _web_env(database.port))
        spawned.start(worker_env(fake_provider), "rqworker", LLM_QUEUE)
        wait_for(lambda: llm_workers() >= 1, timeout=30, what="the llm worker to register")
        wait_for(lambda: _get(web, "/readyz")[0] == 200, timeout=10, what="ready")

        database.cut()
        status, body, elapsed = _get(web, "/readyz")
        assert status == 503, body
        assert body["checks"]["database"]["ok"] is False
        assert body["checks"]["redis"]["ok"] and body["checks"]["llm_workers"]["ok"]
        assert elapsed < ANSWER_WITHIN_SECONDS, elapsed
        assert _get(web, "/healthz")[:2] == (200, {"status": "ok"})

        database.restore()
        assert _get(web, "/readyz")[0] == 200
    lines = parse_every_line(spawned.started[0][1].read_text(), "web")
    states = [line["message"] for line in lines if line["logger"] == "ops.health"]
    assert len(states) == 2, states  # logged when readiness changed, not at every probe
    assert states[0].startswith("not ready: database: ") and states[1] == "ready again"


@pytest.mark.quiet  # a time a probe sees: no other test's load beside it
@pytest.mark.django_db(transaction=True)
def test_a_database_that_never_answers_costs_readyz_under_two_seconds(spawned, silent_port):
    web = start_web(spawned, _web_env(silent_port))
    # A new process's first request pays for what Django loads lazily (URLconf, middleware):
    # a probe meets a process that has answered before; the time measured is the checks'.
    assert _get(web, "/healthz")[0] == 200
    status, body, elapsed = _get(web, "/readyz")
    assert status == 503
    assert body["checks"]["database"]["ok"] is False
    assert body["checks"]["redis"]["ok"] is True
    assert elapsed < ANSWER_WITHIN_SECONDS, elapsed
    assert READY_DEADLINE_SECONDS < ANSWER_WITHIN_SECONDS
    status, body, elapsed = _get(web, "/healthz")
    assert (status, body) == (200, {"status": "ok"}) and elapsed < 0.5
