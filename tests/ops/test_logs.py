"""Structured logs: every line is one JSON object that says which job and request it is about.

- The formatter: JSON per line, the context fields, whitelisted extras only, exceptions kept on
  one line; the context is per thread and per asyncio task, and is gone after its block.
- The request id: taken from a sane X-Request-ID or made, returned in the response, carried by
  the request's lines, under WSGI and under ASGI.
- A real run: uvicorn as the Procfile starts it and a real `manage.py rqworker llm
  --with-scheduler` against the fake provider, one job with a rate-limited first attempt. Every
  line both processes wrote parses as JSON; the job's lines carry its id, feature, model and
  attempt, the web side's its request id; the prompt, the answer and the API key appear nowhere.
"""

import asyncio
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django_rq
import httpx
import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client
from rq import Worker

from jobs.models import LlmJob
from keys.testing import api_key_for
from ledger.models import CostEntry
from llmops.logs import JsonFormatter, PlainFormatter, bind_log_context, log_context
from llmops.queues import LLM_QUEUE
from tests.conftest import ROOT, FakeProvider, _free_port, job_body
from tests.jobs.test_reconciler import _env_for_subprocess
from tests.jobs.test_takeover import Processes, wait_for, worker_env

# --- Helpers ------------------------------------------------------------------------------------


class Captured:
    """Lines the root logger wrote through a JsonFormatter, parsed."""

    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    def text(self) -> str:
        return self.stream.getvalue()

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text().splitlines() if line]


@pytest.fixture
def captured() -> Iterator[Captured]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield Captured(stream)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def parse_every_line(text: str, where: str) -> list[dict[str, Any]]:
    """Each non-empty line as JSON; fails on the first one that is not."""
    parsed = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            pytest.fail(f"{where} line {number} is not JSON: {line!r}")
        assert isinstance(entry, dict), line
        assert {"ts", "level", "logger", "message"} <= set(entry), line
        parsed.append(entry)
    return parsed


def start_web(processes: Processes, env: dict[str, str]) -> str:
    """uvicorn with the Procfile's web flags (no respawn wrapper), on a free port."""
    port = _free_port()
    log = processes.log_dir / f"{len(processes.started)}-web.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "llmops.asgi:application", "--host", "127.0.0.1",
             "--port", str(port), "--timeout-graceful-shutdown", "30"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    processes.started.append((server, log))

    def listening() -> bool:
        assert server.poll() is None, processes.logs()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False

    wait_for(listening, timeout=30, what="uvicorn to listen")
    return f"http://127.0.0.1:{port}"


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (rq's warm shutdown, uvicorn's graceful one), so the last lines are written."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
    process.wait(timeout=30)


def llm_workers() -> int:
    return int(Worker.count(queue=django_rq.get_queue(LLM_QUEUE)))


# --- The formatter and the context --------------------------------------------------------------


def test_it_writes_one_json_object_per_line_with_the_context_and_whitelisted_extras(captured):
    logger = logging.getLogger("tests.logs")
    with log_context(job_id="j-1", feature="email-classify", model="claude-x", attempt=2):
        bind_log_context(provider_request_id="req_1")
        logger.info(
            "job %s %s\nsecond line",
            "j-1",
            "completed",
            extra={"transition": "completed", "prompt": "never-this", "api_key": "never-that"},
        )
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("it failed")
    logger.warning("after", extra={"request_id": "given-by-extra"})

    text = captured.text()
    assert len(text.splitlines()) == 3  # the newline in a message and a traceback stay escaped
    first, failed, after = captured.lines()
    assert first["message"] == "job j-1 completed\nsecond line"
    assert first["level"] == "INFO" and first["logger"] == "tests.logs"
    assert first["ts"].endswith("Z") and "T" in first["ts"]
    assert {k: first[k] for k in ("job_id", "feature", "model", "attempt")} == {
        "job_id": "j-1",
        "feature": "email-classify",
        "model": "claude-x",
        "attempt": 2,
    }
    assert first["provider_request_id"] == "req_1" and first["transition"] == "completed"
    assert "never-this" not in text and "never-that" not in text
    assert failed["level"] == "ERROR" and "ValueError: boom" in failed["exc"]
    assert failed["job_id"] == "j-1"
    # The block is over: its fields (and the bound one) are gone; an extra still counts.
    assert "job_id" not in after and "provider_request_id" not in after
    assert after["request_id"] == "given-by-extra"


def test_it_serialises_any_value_and_drops_empty_context_fields(captured):
    class Odd:
        def __str__(self) -> str:
            raise RuntimeError("no")

    with log_context(job_id=uuid.UUID(int=1), feature="", model=None):
        logging.getLogger("tests.logs").info("x", extra={"cost_usd": Odd(), "status": object()})
    (line,) = captured.lines()
    assert line["job_id"] == str(uuid.UUID(int=1))
    assert "feature" not in line and "model" not in line
    assert line["cost_usd"] == "<unprintable Odd>"


def test_an_unknown_context_field_is_refused():
    with pytest.raises(TypeError, match="prompt"):
        with log_context(prompt="hello"):
            pass


def test_the_context_belongs_to_each_thread_and_each_task(captured):
    logger = logging.getLogger("tests.logs")
    both_bound = threading.Barrier(2)

    def job(job_id: str) -> None:
        with log_context(job_id=job_id):
            both_bound.wait(timeout=5)  # both threads bound at once: a global would collide
            logger.info("thread %s", job_id)

    threads = [threading.Thread(target=job, args=(f"t{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    async def task(job_id: str, started: asyncio.Event, other: asyncio.Event) -> None:
        with log_context(job_id=job_id):
            started.set()
            await other.wait()
            logger.info("task %s", job_id)

    async def both() -> None:
        a, b = asyncio.Event(), asyncio.Event()
        await asyncio.gather(task("a1", a, b), task("a2", b, a))

    asyncio.run(both())
    by_message = {
        line["message"]: line.get("job_id")
        for line in captured.lines()
        if line["logger"] == "tests.logs"
    }
    assert by_message == {"thread t0": "t0", "thread t1": "t1", "task a1": "a1", "task a2": "a2"}


def test_the_plain_format_keeps_the_human_line_with_the_context_after_it():
    record = logging.LogRecord("jobs.runner", logging.INFO, __file__, 1, "job %s", ("j",), None)
    with log_context(job_id="j", attempt=1):
        line = PlainFormatter().format(record)
    assert line.endswith(" INFO jobs.runner job j [job_id=j attempt=1]")


# --- The request id -----------------------------------------------------------------------------


# Transactional: the submit's transition line is written on commit, inside the request.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_a_sane_request_id_is_kept_and_carried_by_the_request_lines(mode, alice, captured, prices):
    token = api_key_for(alice)
    headers = {"Authorization": f"Token {token}", "X-Request-ID": "lb-4f2a:9.1_x"}
    if mode == "wsgi":
        response = Client(headers=headers).post(
            "/api/v1/jobs/", job_body(), content_type="application/json"
        )
    else:
        response = async_to_sync(AsyncClient().post)(
            "/api/v1/jobs/", job_body(), content_type="application/json", headers=headers
        )
    assert response.status_code == 202, response.content
    assert response.headers["X-Request-ID"] == "lb-4f2a:9.1_x"
    job_id = response.json()["id"]

    lines = captured.lines()
    (submitted,) = [line for line in lines if line.get("transition") == "submitted"]
    assert submitted["request_id"] == "lb-4f2a:9.1_x"
    assert submitted["job_id"] == job_id and submitted["feature"] == "email-classify"
    assert "attempt" not in submitted  # no attempt made yet
    (access,) = [line for line in lines if line["logger"] == "llmops.access"]
    assert access["request_id"] == "lb-4f2a:9.1_x"
    assert access["method"] == "POST" and access["path"] == "/api/v1/jobs/"
    assert access["status_code"] == 202 and access["duration_ms"] >= 0


@pytest.mark.django_db
@pytest.mark.parametrize("given", ["x" * 129, "two words", "<script>", "ok\u00e9"])
def test_an_insane_request_id_is_replaced_and_a_refusal_carries_the_new_one(given, captured):
    response = Client(headers={"X-Request-ID": given}).get("/api/v1/jobs/")
    assert response.status_code == 401
    made = response.headers["X-Request-ID"]
    assert made != given and len(made) == 32 and int(made, 16) >= 0
    # Django's own "Unauthorized" line is written inside the request, with its id.
    warning = [line for line in captured.lines() if line["logger"] == "django.request"]
    assert [line.get("request_id") for line in warning] == [made]
    assert given not in captured.text()


def test_no_request_id_makes_a_new_one_per_request(db):
    client = Client()
    first = client.get("/healthz").headers["X-Request-ID"]
    second = client.get("/healthz").headers["X-Request-ID"]
    assert first != second and len(first) == 32


# --- A real run through the web process and a worker ---------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_job_can_be_followed_by_its_id_across_web_and_worker_and_no_secret_is_logged(
    alice, fake_provider: FakeProvider, spawned: Processes, tmp_path: Path
):
    canary = uuid.uuid4().hex
    prompt = f"PROMPT-CANARY-{canary} classify: please refund my order"
    api_key = f"sk-ant-CANARY-{canary}"
    request_id = f"e2e-{canary[:12]}"
    token = api_key_for(alice)

    env = _env_for_subprocess()
    env.pop("LOG_FORMAT", None)  # the default is what is under test
    env.pop("LOG_LEVEL", None)
    web = start_web(spawned, env)
    worker = spawned.start(
        worker_env(
            fake_provider,
            ANTHROPIC_API_KEY=api_key,
            LLM_RETRY_DELAY_SCALE="0.001",
            LLM_HEARTBEAT_SECONDS="0.5",
        ),
        "rqworker",
        LLM_QUEUE,
        "--with-scheduler",
    )
    wait_for(lambda: llm_workers() >= 1, timeout=30, what="the llm worker to register")

    # The first attempt is rate limited (retry-after: 1 s): the job has two attempts at least.
    fake_provider.faults({"429": 1.0}, for_seconds=2.0)
    response = httpx.post(
        f"{web}/api/v1/jobs/",
        json=job_body(messages=[{"role": "user", "content": prompt}]),
        headers={"Authorization": f"Token {token}", "X-Request-ID": request_id},
        timeout=10,
    )
    assert response.status_code == 202, response.text
    assert response.headers["x-request-id"] == request_id
    job_id = response.json()["id"]
    wait_for(
        lambda: LlmJob.objects.get(id=job_id).status == LlmJob.Status.COMPLETED,
        timeout=60,
        what=f"job {job_id} to complete\n{spawned.logs()}",
        every=0.2,
    )
    job = LlmJob.objects.get(id=job_id)
    assert job.attempts >= 2 and job.output_text
    time.sleep(0.5)  # rq's "Job OK" lines follow the commit
    stop(worker)
    stop(spawned.started[0][0])

    web_lines = parse_every_line(spawned.started[0][1].read_text(), "web")
    worker_lines = parse_every_line(spawned.started[1][1].read_text(), "worker")
    everything = spawned.output()

    # Nothing secret, at any level: the prompt, the answer, the API key.
    assert canary not in everything
    assert job.output_text not in everything
    assert any(line["logger"] == "rq.worker" for line in worker_lines)  # rq's lines are JSON too

    # One grep: every line of ours that names the job carries its id as a field.
    for line in web_lines + worker_lines:
        if job_id in line["message"] and not line["logger"].startswith("rq."):
            assert line.get("job_id") == job_id, line
    about_job = [line for line in web_lines + worker_lines if line.get("job_id") == job_id]
    assert {line["feature"] for line in about_job} == {"email-classify"}
    assert {line["model"] for line in about_job} == {"claude-sonnet-4-6"}

    # The web side: the submit carries the caller's request id.
    (submitted,) = [line for line in web_lines if line.get("transition") == "submitted"]
    assert submitted["job_id"] == job_id and submitted["request_id"] == request_id
    (access,) = [line for line in web_lines if line["logger"] == "llmops.access"]
    assert access["request_id"] == request_id and access["status_code"] == 202

    # The worker side: each attempt's lines carry its number and the provider's request id.
    transitions = [
        (line["transition"], line.get("attempt"), line.get("provider_request_id"))
        for line in worker_lines
        if line.get("job_id") == job_id and "transition" in line
    ]
    entries = {
        entry.attempt: entry.request_id
        for entry in CostEntry.objects.filter(job_id=job_id, entry_type=CostEntry.EntryType.ATTEMPT)
    }
    expected = []
    for attempt in range(1, job.attempts + 1):
        expected.append(("claimed", attempt, None))
        final = "completed" if attempt == job.attempts else "retry_scheduled"
        expected.append((final, attempt, entries[attempt]))
    assert transitions == expected, transitions
    assert all(entries.values()), entries
