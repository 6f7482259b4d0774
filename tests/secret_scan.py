"""What tests/test_secret_scan.py runs against and how it looks for the canaries: the processes
of the Procfile, destinations that echo what they are sent, and scanners of the database, Redis
and text."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from django.db import connection

from tests.conftest import ROOT
from tests.jobs.test_reconciler import kill_process_tree

__all__ = ["EchoDestination", "Found", "Processes", "scan_database", "scan_redis", "scan_text"]


class EchoDestination:
    """An HTTP server standing in for Slack, PagerDuty, a webhook or a batch's callback URL.

    Each path prefix answers its own status; every error body repeats the request line and the
    body it was sent, as a careless or hostile destination might, so that a sender that copies
    an error into a log or a row copies the secret with it."""

    def __init__(self, statuses: dict[str, int]) -> None:
        self.statuses = statuses
        self.received: list[tuple[str, bytes]] = []
        destination = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                destination.received.append((self.path, raw))
                status = next(
                    (
                        code
                        for prefix, code in destination.statuses.items()
                        if self.path.startswith(prefix)
                    ),
                    404,
                )
                body = b"ok" if status < 400 else _echo(self.path, raw)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _echo(path: str, raw: bytes) -> bytes:
    """An error body that repeats the request: its path, its body, and each piece on its own
    (the last path segment, each query value), as a destination naming the bad key would."""
    url = urlsplit(path)
    pieces = [url.path.rsplit("/", 1)[-1], *(v for _, v in parse_qsl(url.query))]
    return f"unknown key {' '.join(pieces)}; refused {path}: ".encode() + raw


class Processes:
    """Commands started with their output (stdout and stderr) in a file each; stopped with
    SIGTERM so that they write their last lines, then killed if they linger."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, args: list[str], env: dict[str, str]) -> None:
        log = self.log_dir / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.started.append((name, process, log))

    def alive(self) -> None:
        for name, process, log in self.started:
            assert process.poll() is None, f"{name} exited: {log.read_text()[-3000:]}"

    def stop_all(self) -> None:
        for _, process, _ in self.started:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for _, process, _ in self.started:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_process_tree(process.pid)
                process.wait(timeout=10)

    def outputs(self) -> Iterator[tuple[str, str]]:
        for name, _, log in self.started:
            yield name, log.read_text(errors="replace")


def python_first_on_path(env: dict[str, str]) -> dict[str, str]:
    # The Procfile says "python": the virtualenv's, as honcho runs it.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


Found = tuple[str, str]
"""(where, secret name): a canary seen somewhere."""


def scan_text(where: str, text: str, canaries: dict[str, str]) -> list[Found]:
    return [(where, name) for name, value in canaries.items() if value in text]


def scan_database(canaries: dict[str, str]) -> dict[tuple[str, str], set[str]]:
    """Every row of every table of the test database: {(table, column): {secret names}}."""
    found: dict[tuple[str, str], set[str]] = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            columns = [c[0] for c in cursor.description]
            for row in cursor.fetchall():
                for column, value in zip(columns, row, strict=True):
                    text = (
                        value.decode(errors="replace") if isinstance(value, bytes) else str(value)
                    )
                    for name, canary in canaries.items():
                        if canary in text:
                            found.setdefault((table, column), set()).add(name)
    return found


def _redis_values(redis: Any, key: bytes) -> Iterable[bytes]:
    kind = redis.type(key).decode()
    if kind == "string":
        yield redis.get(key) or b""
    elif kind == "hash":
        for field, value in redis.hgetall(key).items():
            yield field
            yield value
    elif kind == "list":
        yield from redis.lrange(key, 0, -1)
    elif kind == "set":
        yield from redis.smembers(key)
    elif kind == "zset":
        yield from (member for member, _ in redis.zrange(key, 0, -1, withscores=True))
    elif kind == "stream":
        for _, fields in redis.xrange(key):
            for field, value in fields.items():
                yield field
                yield value


def _readable(value: bytes) -> bytes:
    """rq stores a job's call and its results as zlib-compressed pickles: look inside them."""
    try:
        return value + zlib.decompress(value)
    except zlib.error:
        return value


def scan_redis(redis: Any, canaries: dict[str, str]) -> tuple[int, list[Found]]:
    """Every key and value of the test's Redis database; returns how many keys were read."""
    found: list[Found] = []
    keys = list(redis.scan_iter(count=1000))
    for key in keys:
        blobs = [key, *(_readable(v) for v in _redis_values(redis, key))]
        for name, canary in canaries.items():
            if any(canary.encode() in blob for blob in blobs):
                found.append((f"redis {key.decode(errors='replace')}", name))
    return len(keys), found


def json_env(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))
