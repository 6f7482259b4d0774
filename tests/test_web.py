"""The web process as the Procfile starts it (llmops/web.py under the respawn wrapper), on a free
port and the test database: several worker processes serving requests at once, /metrics
counting every process's requests, no database connection left open after a request, one
session across processes, a graceful SIGTERM, and no worker outliving its supervisor.

The slow requests are real ones: ``POST /api/v1/jobs/<id>/cancel/`` while the test holds the
job's row lock in MariaDB, so each request waits inside Django, on a database connection of its
own, until the test lets go. MariaDB then shows exactly how many requests are in flight at once
(its lock waits), and /proc shows which worker process holds each waiting connection.
"""

import asyncio
import glob
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections
from prometheus_client.parser import text_string_to_metric_families

from jobs.models import LlmJob
from keys.services import api_key_authenticate
from keys.testing import api_key_for
from llmops.env import database_url
from tests.conftest import ROOT, _free_port, make_user, procfile_command

pytestmark = pytest.mark.django_db(transaction=True)

PROCESSES = 3
TOKEN = "web-test-metrics-token"


def wait_for(condition: Any, *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def children(pid: int) -> list[int]:
    found = []
    for path in glob.glob("/proc/[0-9]*/stat"):
        stat = _stat(int(path.split("/")[2]))
        if stat is not None and int(stat[1]) == pid:
            found.append(int(path.split("/")[2]))
    return found


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode().split("=", 1) for pair in pairs if b"=" in pair)


def database_connections(pid: int, port: int) -> int:
    """Established TCP connections of process ``pid`` to the database's port."""
    inodes = set()
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


class WebServer:
    """The Procfile's web line; the Popen is the respawn wrapper."""

    def __init__(self, tmp_path: Path, **environment: str) -> None:
        db = connection.settings_dict
        self.db_port = int(db["PORT"])
        env = dict(os.environ)
        env.pop("DJANGO_SECRET_KEY", None)
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        env.update(
            {
                "DATABASE_URL": database_url(db),
                "WEB_CONCURRENCY": str(PROCESSES),
                "METRICS_TOKEN": TOKEN,
                # honcho runs the Procfile with the virtualenv's bin first on PATH.
                "PATH": str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
                **environment,
            }
        )
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / "web.log"
        with self.log.open("wb") as out:
            self.wrapper = subprocess.Popen(
                procfile_command("web", port=self.port),
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for(self._answers, timeout=60, what=f"the web server to answer\n{self.logs()}")

    def _answers(self) -> bool:
        assert self.wrapper.poll() is None, self.logs()
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    @property
    def supervisor(self) -> int:
        (pid,) = children(self.wrapper.pid)
        return pid

    def workers(self) -> list[int]:
        """uvicorn's worker processes (multiprocessing's resource tracker left out)."""
        return [
            pid
            for pid in children(self.supervisor)
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]

    def stop(self) -> None:
        if self.wrapper.poll() is None:
            self.wrapper.send_signal(signal.SIGTERM)
            self.wrapper.wait(timeout=60)


@pytest.fixture
def start_web(tmp_path: Path) -> Iterator[Any]:
    servers: list[WebServer] = []

    def start(**environment: str) -> WebServer:
        server = WebServer(tmp_path, **environment)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def alice_token(db: None) -> str:
    return api_key_for(make_user("alice"))


def waiting_job(token: str) -> LlmJob:
    user = api_key_authenticate(secret=token).user
    return LlmJob.objects.create(
        user=user, feature="f", model="claude-haiku-4-5", messages=[], max_tokens=16
    )


class RowLock:
    """The job's row held FOR UPDATE on a connection of the test's own, and the database's view
    of who waits for it (MariaDB's InnoDB tables, PostgreSQL's pg_stat_activity)."""

    def __init__(self, job: LlmJob) -> None:
        self.database = connection.settings_dict["NAME"]
        self.vendor = connection.vendor
        holder = connections.create_connection(DEFAULT_DB_ALIAS)
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute("SELECT id FROM jobs_llmjob WHERE id = %s FOR UPDATE", (str(job.id),))
        monitor = connections.create_connection(DEFAULT_DB_ALIAS)
        monitor.ensure_connection()  # autocommit, as Django opens it
        # The drivers' own connections from here on: the test asks from its event loop, where
        # Django's wrappers refuse to run.
        self.holder, self.monitor = holder.connection, monitor.connection

    def waiting(self) -> int:
        """Connections of the test database waiting for a row lock. InnoDB refreshes its
        table only once it has not been read for 0.1 s: ask less often than that."""
        with self.monitor.cursor() as cursor:
            if self.vendor == "postgresql":
                cursor.execute(
                    "SELECT COUNT(*) FROM pg_stat_activity "
                    "WHERE datname = %s AND wait_event_type = 'Lock'",
                    (self.database,),
                )
            else:
                cursor.execute(
                    "SELECT COUNT(*) FROM information_schema.INNODB_TRX t "
                    "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
                    "WHERE t.trx_state = 'LOCK WAIT' AND p.DB = %s",
                    (self.database,),
                )
            return int(cursor.fetchone()[0])

    def release(self) -> None:
        self.holder.rollback()

    def close(self) -> None:
        self.holder.close()
        self.monitor.close()


async def cancel_requests(url: str, token: str, job: LlmJob, count: int) -> list[int]:
    """``count`` cancels of one job, each on a connection of its own, 0.1 s apart (a burst in
    the same millisecond tends to be accepted by one process)."""

    async def one(delay: float) -> int:
        await asyncio.sleep(delay)
        async with httpx.AsyncClient(timeout=60) as client:
            response = await client.post(
                f"{url}/api/v1/jobs/{job.id}/cancel/", headers={"Authorization": f"Token {token}"}
            )
            return response.status_code

    return list(await asyncio.gather(*(one(i * 0.1) for i in range(count))))


def requests_counted(text: str, view: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "django_http_requests_total_by_view_transport_method_total"
        and sample.labels.get("view") == view
    )


def test_it_serves_requests_at_once_in_several_processes_and_metrics_count_them_all(
    start_web, alice_token
):
    server = start_web()
    workers = server.workers()
    assert len(workers) == PROCESSES, server.logs()
    job = waiting_job(alice_token)
    lock = RowLock(job)
    requests = 3 * PROCESSES

    async def scenario() -> tuple[list[int], dict[int, int]]:
        answers = asyncio.ensure_future(cancel_requests(server.url, alice_token, job, requests))
        deadline = time.monotonic() + 30
        while lock.waiting() < requests:
            assert not answers.done(), await answers
            assert time.monotonic() < deadline, f"{lock.waiting()} of {requests} waiting"
            await asyncio.sleep(0.25)
        # Every request is inside Django at once, each on a database connection of its own.
        holding = {pid: database_connections(pid, server.db_port) for pid in workers}
        lock.release()
        return await answers, holding

    try:
        statuses, holding = asyncio.run(scenario())
    finally:
        lock.close()
    assert sorted(statuses) == [200] + [409] * (requests - 1)
    assert sum(holding.values()) == requests, holding
    # Which process accepts each connection is the kernel's choice (one listening socket shared
    # by the workers): under load it may give all of them to one, so the spread is not asserted.

    # Whichever process answers a scrape, it counts the requests every process served.
    for _ in range(2 * PROCESSES):
        response = httpx.get(
            f"{server.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )
        assert response.status_code == 200
        assert requests_counted(response.text, "jobs:job-cancel") == requests
        assert "llm_jobs_total" in response.text

    # Each request closed its connection: nothing stays open for the garbage collector.
    assert wait_for(
        lambda: all(database_connections(pid, server.db_port) == 0 for pid in workers),
        timeout=5,
        what="the web workers to close their database connections",
    )


def test_a_session_logged_in_by_one_process_is_good_in_every_other(start_web, db):
    make_user("carol", password="carol-password-1")
    server = start_web(DJANGO_DEBUG="False")
    with httpx.Client(base_url=server.url, timeout=10) as browser:
        browser.get("/login/")
        response = browser.post(
            "/login/",
            data={
                "username": "carol",
                "password": "carol-password-1",
                "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            },
            headers={"Referer": f"{server.url}/login/"},
        )
        assert response.status_code == 302, response.text[:500]
        cookies = dict(browser.cookies)
    # A new connection per request: they land on every process in turn.
    answers = [
        httpx.get(f"{server.url}/api/v1/me/", cookies=cookies, timeout=10).status_code
        for _ in range(6 * PROCESSES)
    ]
    assert answers == [200] * len(answers)


def test_sigterm_lets_every_request_in_flight_finish(start_web, alice_token):
    server = start_web()
    job = waiting_job(alice_token)
    lock = RowLock(job)
    requests = PROCESSES

    async def scenario() -> list[int]:
        answers = asyncio.ensure_future(cancel_requests(server.url, alice_token, job, requests))
        deadline = time.monotonic() + 30
        while lock.waiting() < requests:
            assert time.monotonic() < deadline, f"{lock.waiting()} of {requests} waiting"
            await asyncio.sleep(0.25)
        server.wrapper.send_signal(signal.SIGTERM)
        await asyncio.sleep(1.0)
        assert server.wrapper.poll() is None, "the server left before its requests finished"
        lock.release()
        return await answers

    try:
        statuses = asyncio.run(scenario())
    finally:
        lock.close()
    assert sorted(statuses) == [200] + [409] * (requests - 1)
    assert server.wrapper.wait(timeout=30) == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


def test_no_worker_outlives_a_wrapper_killed_outright(start_web, db):
    server = start_web()
    supervisor, workers = server.supervisor, server.workers()
    assert len(workers) == PROCESSES
    server.wrapper.kill()
    server.wrapper.wait(timeout=10)
    wait_for(
        lambda: not any(alive(pid) for pid in [supervisor, *workers]),
        timeout=30,
        what="the supervisor and every worker to exit",
    )
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


def test_the_metrics_directory_is_the_web_workers_own_and_emptied_at_start(start_web, db, tmp_path):
    # The operator's own directory, with a dead process's file in it.
    directory = tmp_path / "prometheus"
    directory.mkdir()
    (directory / "counter_999999.db").write_bytes(b"\0" * 64)
    server = start_web(PROMETHEUS_MULTIPROC_DIR=str(directory))
    assert not (directory / "counter_999999.db").exists()
    for pid in server.workers():
        assert environ(pid)["PROMETHEUS_MULTIPROC_DIR"] == str(directory)
    server.stop()

    # Without one, a private directory that goes with the server; nothing above the
    # supervisor (the respawn wrapper, and so honcho's other lines: rq workers) sees it.
    server = start_web()
    assert "PROMETHEUS_MULTIPROC_DIR" not in environ(server.wrapper.pid)
    private = Path(environ(server.workers()[0])["PROMETHEUS_MULTIPROC_DIR"])
    assert private.is_dir() and (private.stat().st_mode & 0o077) == 0
    httpx.get(f"{server.url}/healthz", timeout=5)
    server.stop()
    assert not private.exists()
