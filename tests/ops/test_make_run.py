"""``make run`` as a newcomer runs it, on a fresh SQLite file (the zero-setup default) and this
test's Redis index: one banner once every process is ready, with the login and the token that
``make token`` prints again; a job submitted with that token (slash-less, with Bearer, as a
first try often is) completes; ``/metrics`` answers the loopback network at once; the home page
links everything; the logs read as lines, without uvicorn's lifespan noise."""

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.redis]

BASE = "http://127.0.0.1:8000"
READY_TIMEOUT = 240


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    busy = [port for port in (8000, 8787) if not _port_free(port)]
    assert not busy, f"ports {busy} are taken: stop the make run that holds them"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "LLM_", "LOG_", "ANTHROPIC_", "METRICS_", "DEMO_"))
    }
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    log = tmp_path / "make-run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["make", "run"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        yield env, log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_make_run_prints_one_banner_and_a_first_job_works(make_run):
    env, log = make_run
    deadline = time.monotonic() + READY_TIMEOUT
    while "LLM job queue:" not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-6000:]
        time.sleep(1)
    time.sleep(1)  # the rest of the banner
    output = log.read_text(errors="replace")
    assert "LLM job queue: ready" in output, output[-6000:]
    assert output.count("LLM job queue:") == 1
    banner = output[output.index("LLM job queue: ready") :]
    for where in ("/live/", "/admin/", "/admin/ops/dashboard/", "/api/docs/", "/metrics"):
        assert f"{BASE}{where}" in banner
    assert "Demo login     demo / llmops-demo" in banner
    token = subprocess.run(
        ["make", "-s", "token"], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert re.fullmatch(r"llmq_[A-Za-z0-9_-]{43}", token), token
    assert f"API key        {token}" in banner

    http = httpx.Client(base_url=BASE, timeout=10)
    submitted = http.post(
        "/api/v1/jobs",
        headers={"Authorization": f"Bearer {token}"},
        json={
            "feature": "summarize",
            "model": "claude-sonnet-4-6",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "Say hello"}],
        },
    )
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    for _ in range(60):
        job = http.get(f"/api/v1/jobs/{job_id}/", headers={"Authorization": f"Token {token}"})
        if job.json()["status"] == "completed":
            break
        time.sleep(0.5)
    assert job.json()["status"] == "completed", job.text
    assert job.json()["output"]["text"]

    metrics = http.get("/metrics")  # no token, no restart: DEBUG on, loopback
    assert metrics.status_code == 200 and "llm_jobs_total" in metrics.text
    home = http.get("/")
    assert home.status_code == 200
    for link in ('href="/live/"', 'href="/admin/"', 'href="/admin/ops/dashboard/"', "/api/docs/"):
        assert link in home.text

    output = log.read_text(errors="replace")
    assert "lifespan" not in output
    web_lines = [line for line in output.splitlines() if re.match(r"\S+ web\.1\s+\|", line)]
    assert web_lines and not any(line.split("| ", 1)[1].startswith("{") for line in web_lines)
