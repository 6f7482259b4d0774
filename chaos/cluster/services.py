"""What runs on each host: the database forwarder and the fake provider on the database host (the
root namespace), Redis and its replica on their hosts, the Procfile's worker lines on the worker
hosts (the reconciler and the monitor on the third), each started with ``ip netns exec`` and
reaching the others by address only."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from chaos.cluster.redis_hosts import (
    REDIS_URL,
    SENTINEL_ENV,
    redis_commands,
    replica_in_sync,
    sentinels_ready,
)
from chaos.cluster.topology import DB_IP, MARK, Host, Topology
from chaos.processes import Process, Stack, procfile_command, wait_until
from chaos.provider import FakeProvider

__all__ = ["PROVIDER_PORT", "REDIS_URL", "Cluster"]

PROVIDER_PORT = 8787
LOOPS_HOST = "w3"
"""The reconciler, the monitor and the default/alerts worker run beside this host's llm worker."""
FORWARDER = Path(__file__).with_name("forwarder.py")
WORKER_STOP_SECONDS = 45.0
"""A warm stop waits for the calls in flight; a host wedged on a frozen path is killed after."""


class Cluster:
    def __init__(self, topology: Topology, *, database: str, log_dir: Path, run_id: str) -> None:
        self.topology = topology
        self.database = database
        self.redis_url = REDIS_URL
        self.provider_url = f"http://{DB_IP}:{PROVIDER_PORT}"
        env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
        env.update(
            {
                MARK: run_id,
                "DATABASE_URL": f"mysql://root@{DB_IP}:3306/{database}",
                **SENTINEL_ENV,
                "ANTHROPIC_BASE_URL": self.provider_url,
                "PYTHONUNBUFFERED": "1",
                "LOG_LEVEL": "INFO",
            }
        )
        self.stack = Stack(env, log_dir)
        self.workers: dict[str, Process] = {}

    def _start(self, host: Host | None, name: str, args: list[str]) -> Process:
        return self.stack.start(name, host.exec_args(args) if host else args)

    def start_services(self, *, latency_ms: str, seed: int) -> FakeProvider:
        self._start(
            None,
            "db-forwarder",
            # By path: ``-m`` would import the chaos package, and with it Django.
            [sys.executable, str(FORWARDER), f"{DB_IP}:3306", "127.0.0.1:3306"],
        )
        for host, name, args in redis_commands(self.topology, self.stack.log_dir):
            self._start(host, name, args)
            if name == "redis-replica" and not wait_until(
                lambda: replica_in_sync(self.topology), timeout=30
            ):
                raise RuntimeError(f"the Redis replica did not sync:\n{self.stack.log_tails()}")
        self._start(
            None,
            "fake_provider",
            [sys.executable, "manage.py", "fake_anthropic", "--host", DB_IP,
             "--port", str(PROVIDER_PORT), "--latency-ms", latency_ms, "--seed", str(seed),
             "--rpm", "20000"],
        )  # fmt: skip
        provider = FakeProvider(self.provider_url)
        if not wait_until(lambda: provider.http.get("/_fake/health").is_success, timeout=60):
            raise RuntimeError(f"the fake provider did not start:\n{self.stack.log_tails()}")
        if not wait_until(lambda: sentinels_ready(self.topology), timeout=60):
            raise RuntimeError(f"the sentinels did not start:\n{self.stack.log_tails()}")
        return provider

    def start_loops(self) -> None:
        """The reconciler, the monitor and the default/alerts worker on the loops' host."""
        host = self.topology[LOOPS_HOST]
        for line in ("reconciler", "monitor", "worker_default"):
            self._start(host, f"{line}@{host.name}", procfile_command(line))

    def start_worker(
        self, host: Host, *, concurrency: int | None = None, env: dict[str, str] | None = None
    ) -> Process:
        """The Procfile's llm worker on ``host``; running once it has registered with rq.
        ``concurrency`` replaces LLM_WORKER_CONCURRENCY (its default otherwise); ``env`` adds
        to its environment."""
        more = dict(env or {})
        if concurrency is not None:
            more["LLM_WORKER_CONCURRENCY"] = str(concurrency)
        process = self._start(host, f"worker_llm@{host.name}", _with_env("worker_llm", more))
        self.workers[host.name] = process
        return process

    def start_agents_worker(self, host: Host, *, env: dict[str, str] | None = None) -> Process:
        """The Procfile's agents worker on ``host`` (tool steps), ``env`` added."""
        process = self._start(
            host, f"worker_agents@{host.name}", _with_env("worker_agents", env or {})
        )
        self.workers[f"agents@{host.name}"] = process
        return process

    def stop_agents_worker(self, host: Host) -> None:
        self._stop(self.workers.pop(f"agents@{host.name}", None))

    def worker_registered(self, host: Host) -> bool:
        from chaos import events

        process = self.workers.get(host.name)
        pid = process.command_pid() if process else None
        return pid is not None and pid in events.llm_worker_pids()

    def stop_worker(self, host: Host) -> None:
        """A warm stop of the host's llm worker, then SIGKILL of what is left after
        WORKER_STOP_SECONDS (a worker still wedged on a frozen path)."""
        self._stop(self.workers.pop(host.name, None))

    def _stop(self, process: Process | None) -> None:
        if process is None:
            return
        tree = process.tree()
        self.stack.stop_process(process)
        try:
            process.popen.wait(timeout=WORKER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        for pid in tree + process.tree():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.popen.wait(timeout=10)

    def kill_redis_primary(self) -> int:
        """kill -9 of the Redis primary's server (its host's sentinel lives on); its pid."""
        process = next(p for p in self.stack.processes if p.name == "redis-primary")
        self.stack.stopped_on_purpose.add(process.name)
        process.popen.kill()
        process.popen.wait(timeout=10)
        return process.popen.pid

    def kill_host(self, host: Host) -> list[int]:
        """kill -9 of every process on the host at once (not restarted: the host is gone)."""
        for process in self.stack.processes:
            if process.name.endswith(f"@{host.name}"):
                self.stack.stopped_on_purpose.add(process.name)
        self.workers.pop(host.name, None)
        self.workers.pop(f"agents@{host.name}", None)
        pids = self.topology.kill_host(host)
        time.sleep(0.2)
        return pids


def _with_env(line: str, env: dict[str, str]) -> list[str]:
    """The Procfile line's command, with ``env`` added to its environment."""
    args = procfile_command(line)
    return ["env", *(f"{k}={v}" for k, v in env.items()), *args] if env else args
