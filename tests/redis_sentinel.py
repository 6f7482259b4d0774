"""A Redis primary, one replica and three sentinels (quorum 2) as real processes on free ports,
for the tests of a failover (tests/test_redis_failover.py).

The sentinels take the primary for down after ``DOWN_AFTER_MS`` and fail over at once; a
failover ends within a few seconds. ``kill_primary`` is ``kill -9``. The replica replicates
through a NetCut (tests/netcut.py): ``cut_replication`` cuts that link, so that what is written
meanwhile reaches the primary only and is lost with it, as the writes a real primary had not
replicated yet when it died."""

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from redis import Redis
from redis.exceptions import RedisError

from tests.netcut import NetCut

__all__ = ["MASTER", "SentinelGroup", "sentinel_group"]

MASTER = "llmops-test"
DOWN_AFTER_MS = 1000
# Long enough that the sentinels leave alone a replica that names the NetCut's port as its
# primary's (they "fix" such a replica after failover-timeout); a failover itself takes seconds.
FAILOVER_TIMEOUT_MS = 120_000
QUORUM = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sentinel_command() -> list[str]:
    """Debian's redis-sentinel, or redis-server in sentinel mode (the same program); skips the
    test when neither is installed (`make test` installs them: scripts/system-deps.sh)."""
    if shutil.which("redis-sentinel"):
        return ["redis-sentinel"]
    if shutil.which("redis-server"):
        return ["redis-server"]
    pytest.skip("no redis-server or redis-sentinel on PATH (apt-get install redis-sentinel)")


class SentinelGroup:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.primary_port = _free_port()
        self.replica_port = _free_port()
        self.sentinel_ports = [_free_port() for _ in range(3)]
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.replication: NetCut | None = None

    @property
    def url(self) -> str:
        """The redis+sentinel:// URL of the group's database 0."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{MASTER}/0"

    @property
    def sentinels(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.sentinel_ports]

    def start(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            pytest.skip("no redis-server on PATH (apt-get install redis-server)")
        sentinel = _sentinel_command()
        common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self._start("primary", [server, "--port", str(self.primary_port), *common])
        self.replication = NetCut("127.0.0.1", self.primary_port)
        self._start(
            "replica",
            [server, "--port", str(self.replica_port), *common]
            + ["--replicaof", "127.0.0.1", str(self.replication.port)],
        )
        # The sentinels list the replicas the primary names at their first look (then every
        # 10 s): started once the replica is in sync, they know it at once.
        self._wait_until(self._replica_in_sync, "the replica to sync")
        for index, port in enumerate(self.sentinel_ports):
            config = self.directory / f"sentinel-{index}.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} {QUORUM}\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {MASTER} 1\n"
            )
            args = [*sentinel, str(config)]
            if Path(sentinel[0]).name == "redis-server":
                args.append("--sentinel")
            self._start(f"sentinel-{index}", args)
        self._wait_until(self._sentinels_ready, "the sentinels to know each other")

    def _start(self, name: str, args: list[str]) -> None:
        with (self.directory / f"{name}.log").open("wb") as out:
            self.processes[name] = subprocess.Popen(
                args, cwd=self.directory, stdout=out, stderr=subprocess.STDOUT
            )

    def _wait_until(self, ready: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ready():
                    return
            except RedisError:
                pass
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")
            time.sleep(0.1)

    def _replica_in_sync(self) -> bool:
        with Redis(port=self.replica_port, socket_timeout=1) as replica:
            return bool(replica.info("replication").get("master_link_status") == "up")

    def _sentinels_ready(self) -> bool:
        """Every sentinel knows the replica and the other two: a failover needs all of that."""
        for port in self.sentinel_ports:
            with Redis(port=port, socket_timeout=1, decode_responses=True) as sentinel:
                replicas = sentinel.execute_command("SENTINEL", "REPLICAS", MASTER)
                others = sentinel.execute_command("SENTINEL", "SENTINELS", MASTER)
                if len(replicas) != 1 or len(others) != 2:
                    return False
        return True

    def wait_replicated(self, timeout: float = 10) -> None:
        """Until the replica has every write the primary took so far (Redis' WAIT)."""
        with Redis(port=self.primary_port, socket_timeout=timeout + 1) as primary:
            acked = primary.execute_command("WAIT", 1, int(timeout * 1000))
        assert acked >= 1, f"the replica did not catch up within {timeout} s:\n{self.logs()}"

    def kill_primary(self) -> None:
        self.processes["primary"].kill()
        self.processes["primary"].wait(timeout=10)

    def cut_replication(self) -> None:
        """From now on the primary's writes are not replicated."""
        assert self.replication is not None
        self.replication.cut()

    def wait_for_failover(self, timeout: float = 30) -> float:
        """Until every sentinel names the replica as the primary and the replica says it is one;
        returns the seconds waited."""
        started = time.monotonic()
        while True:
            try:
                if self._failed_over():
                    return time.monotonic() - started
            except RedisError:
                pass
            if time.monotonic() - started > timeout:
                raise AssertionError(f"no failover within {timeout} s:\n{self.logs()}")
            time.sleep(0.1)

    def _failed_over(self) -> bool:
        for port in self.sentinel_ports:
            with Redis(port=port, socket_timeout=1, decode_responses=True) as sentinel:
                address = sentinel.sentinel_get_master_addr_by_name(MASTER)
                if not address or int(address[1]) != self.replica_port:
                    return False
        with Redis(port=self.replica_port, socket_timeout=1) as replica:
            return bool(replica.info("replication").get("role") == "master")

    def logs(self) -> str:
        return "\n".join(
            f"--- {log.name} ---\n{log.read_text(errors='replace')[-2000:]}"
            for log in sorted(self.directory.glob("*.log"))
        )

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
        if self.replication is not None:
            self.replication.close()


@contextmanager
def sentinel_group(directory: Path) -> Iterator[SentinelGroup]:
    directory.mkdir(parents=True, exist_ok=True)
    group = SentinelGroup(directory)
    try:
        group.start()
        yield group
    finally:
        group.stop()
