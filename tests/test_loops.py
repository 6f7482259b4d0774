"""LoopCommand: long-running loops outlive Redis and the database going away, and stop cleanly."""

import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection

from alerts.models import Alert, LoopHeartbeat
from llmops.env import database_url as env_database_url
from loops.command import LoopCommand, error_backoff_seconds
from tests.conftest import ROOT, _free_port
from tests.db_sessions import kill_own_session, session_id

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(check: Callable[[], Any], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class PrivateRedis:
    """A redis-server of the test's own, on a free port, that the test stops and starts."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        probe = ["redis-cli", "-p", str(self.port), "ping"]
        wait_for(
            lambda: subprocess.run(probe, capture_output=True).stdout.strip() == b"PONG",
            timeout=10,
            what="redis-server to answer",
        )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    redis = PrivateRedis(_free_port())
    redis.start()
    yield redis
    redis.kill()


def database_url() -> str:
    return env_database_url(connection.settings_dict)


def heartbeat(name: str) -> LoopHeartbeat | None:
    return LoopHeartbeat.objects.filter(name=name).first()


def test_a_loop_survives_redis_going_away_and_passes_again_once_it_is_back(
    private_redis, tmp_path: Path
):
    if connection.vendor == "sqlite":
        pytest.skip("the loop runs in another process: it needs a database server")
    log = (tmp_path / "monitor.log").open("wb")
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        REDIS_URL=private_redis.url,
        LOOP_ERROR_BACKOFF_SECONDS="0.2",
        ALERT_ROUTES="{}",
    )
    monitor = subprocess.Popen(
        [sys.executable, "manage.py", "monitor_queues", "--loop", "--interval", "0.5"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        first = wait_for(
            lambda: (beat := heartbeat("monitor")) and beat.last_pass_at and beat,
            timeout=15,
            what="a first pass",
        )
        assert first.interval_seconds == 0.5 and first.host.endswith(f":{monitor.pid}")

        private_redis.kill()
        failed = wait_for(
            lambda: (beat := heartbeat("monitor")) and beat.last_error_at and beat,
            timeout=15,
            what="a failed pass to be recorded",
        )
        assert failed.last_error.startswith("ConnectionError: ")
        # Failing every pass, it is stalled after three intervals, and says so itself: the
        # database still answers, so the check each pass runs still works.
        wait_for(
            lambda: Alert.objects.filter(fingerprint="loop_stalled:monitor").exists(),
            timeout=15,
            what="the stall alert",
        )
        assert monitor.poll() is None

        private_redis.start()
        back = time.time()
        wait_for(
            lambda: heartbeat("monitor").last_pass_at.timestamp() > back,
            timeout=15,
            what="a pass after Redis came back",
        )
        wait_for(
            lambda: Alert.objects.filter(
                fingerprint="loop_stalled:monitor", action="resolve"
            ).exists(),
            timeout=10,
            what="the stall alert to resolve",
        )
        assert monitor.poll() is None

        monitor.send_signal(signal.SIGTERM)
        assert monitor.wait(timeout=10) == 0
        # Stopped on purpose: its heartbeat says so, and no loop will call it stalled.
        assert heartbeat("monitor").last_pass_at is None
    finally:
        if monitor.poll() is None:
            monitor.kill()
            monitor.wait()
        log.close()
    output = (tmp_path / "monitor.log").read_text()
    assert "monitor: pass failed (1 in a row)" in output
    assert "Traceback" in output and "redis.exceptions.ConnectionError" in output
    assert "monitor: loop stopped" in output


def test_without_loop_an_error_fails_the_command(tmp_path: Path):
    if connection.vendor == "sqlite":
        pytest.skip("the command runs in another process: it needs a database server")
    env = dict(
        os.environ, DATABASE_URL=database_url(), REDIS_URL=f"redis://127.0.0.1:{_free_port()}/0"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "monitor_queues"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert b"ConnectionError" in result.stderr


class ScriptedLoop(LoopCommand):
    """A loop whose passes do what the test says, on the real database."""

    loop_name = "scripted"
    interval_setting = "LLM_RECONCILE_INTERVAL"

    def __init__(self, script: Callable[["ScriptedLoop", int], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.script = script
        self.passes = 0
        self.connection_ids: list[int] = []

    def run_pass(self) -> str:
        self.passes += 1
        with connection.cursor() as cursor:
            self.connection_ids.append(session_id(cursor))
        self.script(self, self.passes)
        return f"pass {self.passes}"


def run_loop(loop: ScriptedLoop, *args: str) -> str:
    out = io.StringIO()
    call_command(loop, *args, stdout=out)
    return out.getvalue()


def test_a_database_error_in_a_pass_is_survived_on_a_fresh_connection(settings, caplog):
    if connection.vendor == "sqlite":
        pytest.skip("kills its own database connection")
    settings.LOOP_ERROR_BACKOFF_SECONDS = 0.05

    def script(loop: ScriptedLoop, n: int) -> None:
        if n == 2:
            # The server drops the connection under the loop, as a database restart would.
            with connection.cursor() as cursor:
                kill_own_session(cursor)
        if n == 4:
            loop.request_stop()

    loop = ScriptedLoop(script)
    with caplog.at_level("INFO", logger="loops.command"):
        # Not shorter: the loop checks its own liveness (a loop is stalled after three
        # intervals without a pass), and pass 2's failure, back-off and reconnect took more than
        # 3 x 0.05 s on a loaded machine: a stall alert of its own then joined the reports.
        run_loop(loop, "--loop", "--interval", "0.5")
    assert loop.passes == 4
    # Looping, each pass's report is a log line of its own.
    reports = [r.getMessage() for r in caplog.records if getattr(r, "loop", None) == "scripted"]
    assert reports == ["scripted: pass 1", "scripted: pass 3", "scripted: pass 4"]
    # Pass 2 broke its connection; pass 3 ran on a new one.
    assert loop.connection_ids[1] == loop.connection_ids[0]
    assert loop.connection_ids[2] != loop.connection_ids[1]
    beat = LoopHeartbeat.objects.get(name="scripted")
    killed = "terminating connection" if connection.vendor == "postgresql" else "(1927"
    assert beat.last_error.startswith(f"OperationalError: {killed}")
    assert beat.last_error_at is not None and beat.last_pass_at is None  # stopped on purpose


def test_any_error_is_survived_and_the_back_off_grows(settings, caplog):
    settings.LOOP_ERROR_BACKOFF_SECONDS = 0.05

    def script(loop: ScriptedLoop, n: int) -> None:
        if n in (2, 3, 4):
            raise ValueError(f"bug number {n}")
        if n == 5:
            loop.request_stop()

    loop = ScriptedLoop(script)
    run_loop(loop, "--loop", "--interval", "0.2")
    assert loop.passes == 5
    failures = [r.getMessage() for r in caplog.records if "pass failed" in r.getMessage()]
    assert failures == [
        "scripted: pass failed (1 in a row); next try in 0.05s",
        "scripted: pass failed (2 in a row); next try in 0.1s",
        "scripted: pass failed (3 in a row); next try in 0.2s",
    ]
    assert LoopHeartbeat.objects.get(name="scripted").last_error == "ValueError: bug number 4"


def test_without_loop_one_pass_runs_and_its_error_raises():
    def script(loop: ScriptedLoop, n: int) -> None:
        raise OperationalError("database is down")

    loop = ScriptedLoop(script)
    with pytest.raises(OperationalError):
        run_loop(loop)
    assert loop.passes == 1
    assert not LoopHeartbeat.objects.exists()  # a one-off run is no loop to watch


def test_sigterm_stops_the_loop_without_waiting_out_the_interval():
    loop = ScriptedLoop(lambda loop, n: None)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    previous = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    timer.start()
    try:
        run_loop(loop, "--loop", "--interval", "60")
    finally:
        timer.cancel()
    assert time.monotonic() - started < 5
    assert loop.passes == 1
    assert signal.getsignal(signal.SIGTERM) is previous  # handlers put back
    assert LoopHeartbeat.objects.get(name="scripted").last_pass_at is None


def test_the_error_back_off_doubles_up_to_the_interval_or_the_maximum(settings):
    settings.LOOP_ERROR_BACKOFF_SECONDS = 1.0
    settings.LOOP_ERROR_BACKOFF_MAX_SECONDS = 30.0
    assert [error_backoff_seconds(failures=n, interval=15) for n in range(1, 7)] == [
        1, 2, 4, 8, 15, 15,
    ]  # fmt: skip
    assert [error_backoff_seconds(failures=n, interval=300) for n in (5, 6, 7, 500)] == [
        16, 30, 30, 30,
    ]  # fmt: skip
