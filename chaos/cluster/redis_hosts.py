"""Redis on the cluster's hosts: the primary on redis1, its replica on redis2, and three
sentinels (one on each of redis1, redis2, redis3; quorum 2) that every process of the drill,
its own too, finds the primary through (``REDIS_SENTINELS`` with ``REDIS_SENTINEL_MASTER``).

The sentinels take the primary for down after 5 s, the value docs/deploy.md#redis-sentinel
recommends. ``cut_replication`` drops the replica's link to the primary on the replica's veth,
so that what is written meanwhile reaches the primary only and is lost with it.
"""

import shutil
import subprocess
from pathlib import Path

from chaos.cluster.topology import HOSTS, Host, Topology

__all__ = [
    "PRIMARY_HOST",
    "REDIS_URL",
    "REPLICA_HOST",
    "SENTINEL_ENV",
    "SENTINEL_HOSTS",
    "SENTINEL_MASTER",
    "failover_done",
    "queue_lengths",
    "redis_commands",
    "replica_in_sync",
    "sentinels_ready",
]

PRIMARY_HOST = "redis1"
REPLICA_HOST = "redis2"
SENTINEL_HOSTS = ("redis1", "redis2", "redis3")
SENTINEL_MASTER = "llmcd"
SENTINEL_PORT = 26379
DOWN_AFTER_MS = 5000
QUORUM = 2
_IPS = {host.name: host.ip for host in HOSTS}
SENTINELS = ",".join(f"{_IPS[name]}:{SENTINEL_PORT}" for name in SENTINEL_HOSTS)
REDIS_URL = f"redis+sentinel://{SENTINELS}/{SENTINEL_MASTER}/0"
"""The drill's own process (make cluster-drill sets it): the same sentinels in one value."""
SENTINEL_ENV = {
    "REDIS_SENTINELS": SENTINELS,
    "REDIS_SENTINEL_MASTER": SENTINEL_MASTER,
    # With the sentinels, REDIS_URL gives the database number only (its host is not used).
    "REDIS_URL": f"redis://{SENTINEL_MASTER}/0",
}
"""Every product process of the drill."""


def redis_commands(topology: Topology, log_dir: Path) -> list[tuple[Host, str, list[str]]]:
    """(host, name, command) of the primary, the replica and the sentinels, in starting order.
    Each in a directory of its own: a replica writes the primary's snapshot to its directory,
    which a Redis started there later would load; a sentinel rewrites its configuration."""
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    common = ["--port", "6379", "--save", "", "--appendonly", "no", "--protected-mode", "no"]
    primary, replica = topology[PRIMARY_HOST], topology[REPLICA_HOST]
    out = []
    for host in (primary, replica):
        directory = log_dir / host.name
        directory.mkdir(exist_ok=True)
        args = [server, "--bind", host.ip, "--dir", str(directory), *common]
        if host is replica:
            args += ["--replicaof", primary.ip, "6379"]
        out.append((host, "redis-primary" if host is primary else "redis-replica", args))
    for name in SENTINEL_HOSTS:
        host = topology[name]
        directory = log_dir / host.name
        directory.mkdir(exist_ok=True)
        config = directory / "sentinel.conf"
        config.write_text(
            f"port {SENTINEL_PORT}\nbind {host.ip}\nprotected-mode no\ndir {directory}\n"
            f"sentinel monitor {SENTINEL_MASTER} {primary.ip} 6379 {QUORUM}\n"
            f"sentinel down-after-milliseconds {SENTINEL_MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel parallel-syncs {SENTINEL_MASTER} 1\n"
        )
        sentinel = shutil.which("redis-sentinel")
        args = [sentinel, str(config)] if sentinel else [server, str(config), "--sentinel"]
        out.append((host, f"sentinel-{name}", args))
    return out


def _cli(ip: str, port: int, *args: str) -> str:
    done = subprocess.run(
        ["redis-cli", "-h", ip, "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=5,
    )
    return done.stdout.strip()


def replica_in_sync(topology: Topology) -> bool:
    return "master_link_status:up" in _cli(topology[REPLICA_HOST].ip, 6379, "info", "replication")


def sentinels_ready(topology: Topology) -> bool:
    """Every sentinel knows the replica and the other two: a failover needs all of that."""
    for name in SENTINEL_HOSTS:
        ip = topology[name].ip
        flags = _cli(ip, SENTINEL_PORT, "sentinel", "master", SENTINEL_MASTER).splitlines()
        fields = dict(zip(flags[::2], flags[1::2], strict=False))
        if fields.get("num-slaves") != "1" or fields.get("num-other-sentinels") != "2":
            return False
    return True


def failover_done(topology: Topology, *, alive: tuple[str, ...]) -> bool:
    """The sentinels on the ``alive`` hosts name the replica as the primary, and it says it is
    one."""
    replica = topology[REPLICA_HOST]
    for name in alive:
        named = _cli(
            topology[name].ip, SENTINEL_PORT, "sentinel", "get-master-addr-by-name",
            SENTINEL_MASTER,
        ).splitlines()  # fmt: skip
        if not named or named[0] != replica.ip:
            return False
    return "role:master" in _cli(replica.ip, 6379, "info", "replication")


def queue_lengths(topology: Topology, queue: str) -> tuple[int, int]:
    """The length of ``queue``'s RQ list on the primary and on the replica."""
    lengths = []
    for name in (PRIMARY_HOST, REPLICA_HOST):
        ip = topology[name].ip
        keys = _cli(ip, 6379, "--scan", "--pattern", f"*rq:queue:{queue}").splitlines()
        lengths.append(int(_cli(ip, 6379, "llen", keys[0]) or 0) if keys else 0)
    return lengths[0], lengths[1]
