"""What the benchmarks share: their own database and Redis index, and the Procfile's processes
started as honcho starts them (each under the respawn wrapper), on free ports.

Not a benchmark itself; imported by bench/submit.py and bench/pipeline.py.
"""

import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PROCFILE = ROOT / "Procfile"

__all__ = [
    "ROOT",
    "Stack",
    "django_bench",
    "free_port",
    "machine",
    "procfile_command",
    "recreate_database",
    "wait_for",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


RESPAWN = ["python", "-m", "runtime.respawn", "--"]


def procfile_command(name: str, *, port: int | None = None, respawn: bool = True) -> list[str]:
    """The Procfile's line ``name`` as an argument list; ``--port 8000`` (the web line's) becomes
    ``port``. ``respawn=False`` leaves out the respawn wrapper (a burst worker must not be
    started again when it is done)."""
    for line in PROCFILE.read_text().splitlines():
        key, _, command = line.partition(":")
        if key.strip() == name:
            args = shlex.split(command)
            if port is not None:
                args[args.index("--port") + 1] = str(port)
            if not respawn and args[: len(RESPAWN)] == RESPAWN:
                args = args[len(RESPAWN) :]
            return args
    raise LookupError(f"no {name!r} line in {PROCFILE}")


def recreate_database(url: str) -> None:
    name = url.rsplit("/", 1)[-1]
    subprocess.run(
        ["mysql", "-h127.0.0.1", "-uroot", "-e",
         f"DROP DATABASE IF EXISTS `{name}`; CREATE DATABASE `{name}` CHARACTER SET utf8mb4"],
        check=True,
    )  # fmt: skip


def wait_for(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (httpx.TransportError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def machine() -> str:
    cores = len(os.sched_getaffinity(0))
    return f"{cores} cores, Python {sys.version.split()[0]}"


class Stack:
    """Processes started for a benchmark, each stopped with SIGTERM (graceful) at the end."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        # honcho runs the Procfile with the virtualenv's bin first on PATH (make run).
        bin_dir = str(Path(sys.executable).parent)
        self.env = {
            # The submit throttle stays in the measured path (its Redis round trip), at a rate no
            # benchmark reaches: one user submits here for everyone (api/submit_throttles.py).
            "LLM_SUBMIT_THROTTLE_RATE": "1000000/min",
            **env,
            "PATH": bin_dir + os.pathsep + env.get("PATH", ""),
        }
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{len(self.processes)}-{name}.log").open("wb")
        process = subprocess.Popen(args, cwd=ROOT, env=self.env, stdout=log, stderr=log)
        self.processes.append(process)
        return process

    def fake_provider(self, *, latency_ms: int = 0) -> str:
        port = free_port()
        self.start(
            [sys.executable, "manage.py", "fake_anthropic", "--port", str(port),
             "--latency-ms", str(latency_ms)],
            "fake_provider",
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_for(
            lambda: httpx.get(f"{url}/_fake/health", timeout=1).status_code == 200,
            timeout=30,
            what="the fake provider",
        )
        return url

    def web(self) -> str:
        """The Procfile's web line on a free port; returns its base URL once it answers."""
        port = free_port()
        self.start(procfile_command("web", port=port), "web")
        url = f"http://127.0.0.1:{port}"
        wait_for(
            lambda: httpx.get(f"{url}/healthz", timeout=2).status_code == 200,
            timeout=60,
            what="the web server",
        )
        return url

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()


@contextmanager
def django_bench(env: dict[str, str], *, prefix: str, latency_ms: int = 0) -> Iterator[Stack]:
    """A benchmark's own database (recreated and migrated), the fake provider at ``latency_ms``,
    and Django set up in this process on both; every process it started is stopped at the end."""
    recreate_database(env["DATABASE_URL"])
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    with tempfile.TemporaryDirectory(prefix=prefix) as logs:
        stack = Stack(env, Path(logs))
        try:
            provider = stack.fake_provider(latency_ms=latency_ms)
            env["ANTHROPIC_BASE_URL"] = stack.env["ANTHROPIC_BASE_URL"] = provider
            os.environ.update(env)
            import django

            django.setup()
            yield stack
        finally:
            stack.stop()
