"""The cluster's hosts on this machine: one network namespace per host, each with a veth pair to
a bridge in the root namespace and a fixed address; the root namespace is the database host.

Paths are frozen on the root namespace's end of a host's veth (nftables, netdev family: the
ingress hook sees what the host sends, the egress hook what it receives), so packets are dropped
in transit: connections stay open, the host's own sends succeed, nothing is refused or reset,
bytes just stop, as on a dead switch. A drop inside the host's namespace would not do: a packet
dropped on a host's own output returns EPERM to the sender at once.

Every name made here starts with ``PREFIX``; ``clean`` removes whatever an earlier run left
(namespaces, links, nftables tables and every process carrying the drill's mark in its
environment), so a run after a crash starts clean.
"""

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BRIDGE",
    "DB_IP",
    "HOSTS",
    "MARK",
    "PATHS",
    "PREFIX",
    "Host",
    "Topology",
    "clean",
    "netns_allowed",
]

PREFIX = "llmcd"
"""Namespaces are ``llmcd-<host>``, links ``llmcd<n>``, nftables tables ``llmcd_<host>``."""
BRIDGE = "llmcdbr"
SUBNET = "10.77.0"
DB_IP = f"{SUBNET}.1"
"""The root namespace on the bridge: MariaDB (through a forwarder) and the fake provider."""
MARK = "LLM_CLUSTER_DRILL"
"""Every process the drill starts has this variable in its environment: found and killed by
``clean`` even when the run that started it is gone."""
REDIS_PORTS = (6379, 26379)
"""Redis and its Sentinels."""
DB_PORT = 3306
PATHS = ("database", "redis", "everything")


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    index: int

    @property
    def netns(self) -> str:
        return f"{PREFIX}-{self.name}"

    @property
    def link(self) -> str:
        """The root namespace's end of its veth (the other end is eth0 in the host)."""
        return f"{PREFIX}{self.index}"

    @property
    def table(self) -> str:
        return f"{PREFIX}_{self.name}"

    def exec_args(self, args: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *args]


HOSTS = (
    Host("redis1", f"{SUBNET}.11", 11),
    Host("redis2", f"{SUBNET}.12", 12),
    Host("redis3", f"{SUBNET}.13", 13),
    Host("web1", f"{SUBNET}.21", 21),
    Host("web2", f"{SUBNET}.22", 22),
    Host("w1", f"{SUBNET}.31", 31),
    Host("w2", f"{SUBNET}.32", 32),
    Host("w3", f"{SUBNET}.33", 33),
)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _nft(script: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nft", "-f", "-"], input=script, capture_output=True, text=True, check=check
    )


def netns_allowed() -> str:
    """Empty when this process may build the hosts; else why not, in words."""
    if os.geteuid() != 0:
        return "the cluster drill builds network namespaces: it runs as root"
    for tool in ("ip", "nft"):
        if subprocess.run(["which", tool], capture_output=True).returncode:
            return f"the cluster drill needs {tool} (scripts/system-deps.sh installs nftables)"
    probe = f"{PREFIX}-probe"
    done = _ip("netns", "add", probe, check=False)
    if done.returncode:
        return f"`ip netns add` is not permitted here: {done.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return ""


def _marked_pids() -> list[int]:
    marker = f"{MARK}=".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(item.startswith(marker) for item in environ.split(b"\0")):
            found.append(int(entry.name))
    return found


def namespace_pids(host: Host) -> list[int]:
    done = _ip("netns", "pids", host.netns, check=False)
    return [int(pid) for pid in done.stdout.split()] if done.returncode == 0 else []


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def clean() -> list[str]:
    """Remove what any run of the drill left; returns what it removed, in words."""
    removed = []
    pids = _marked_pids()
    for host in HOSTS:
        pids += namespace_pids(host)
    if pids:
        kill_pids(sorted(set(pids)))
        removed.append(f"{len(set(pids))} processes")
        time.sleep(0.5)
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    for line in tables.splitlines():
        family, _, name = line.removeprefix("table ").partition(" ")
        if name.startswith(f"{PREFIX}_"):
            _nft(f"delete table {family} {name}\n", check=False)
            removed.append(f"nft table {name}")
    namespaces = _ip("netns", "list", check=False).stdout.split("\n")
    for line in namespaces:
        name = line.split(" ")[0]
        if name.startswith(f"{PREFIX}-"):
            _ip("netns", "del", name, check=False)
            removed.append(f"namespace {name}")
    for host in HOSTS:
        if _ip("link", "show", host.link, check=False).returncode == 0:
            _ip("link", "del", host.link, check=False)
            removed.append(f"link {host.link}")
    if _ip("link", "show", BRIDGE, check=False).returncode == 0:
        _ip("link", "del", BRIDGE, check=False)
        removed.append(f"bridge {BRIDGE}")
    return removed


class Topology:
    """The hosts, built by ``build`` and removed by ``clean``; paths frozen and healed."""

    def __init__(self) -> None:
        self.hosts = {host.name: host for host in HOSTS}
        self.frozen: dict[str, str] = {}

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def build(self) -> None:
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{DB_IP}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for host in HOSTS:
            _ip("netns", "add", host.netns)
            _ip(
                "link",
                "add",
                host.link,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.netns,
            )
            _ip("link", "set", host.link, "master", BRIDGE, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.ip}/24", "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")

    def freeze(self, host: Host, path: str) -> None:
        """Drop, both ways, the host's packets to and from the database, Redis (and its
        Sentinels), or everything."""
        if path == "database":
            out, back = (
                f"ip daddr {DB_IP} tcp dport {DB_PORT} drop",
                f"ip saddr {DB_IP} tcp sport {DB_PORT} drop",
            )
        elif path == "redis":
            ports = ", ".join(map(str, REDIS_PORTS))
            out, back = f"tcp dport {{ {ports} }} drop", f"tcp sport {{ {ports} }} drop"
        elif path == "everything":
            out = back = "meta protocol ip drop"
        else:
            raise ValueError(f"a path is one of {', '.join(PATHS)}, not {path!r}")
        _nft(
            f"table netdev {host.table} {{\n"
            f'  chain sent {{ type filter hook ingress device "{host.link}" priority 0; {out}; }}\n'
            f'  chain received {{ type filter hook egress device "{host.link}" priority 0; '
            f"{back}; }}\n"
            "}\n"
        )
        self.frozen[host.name] = path

    def cut_replication(self, replica: Host, primary: Host) -> None:
        """Drop, both ways, the replica host's packets to and from the primary's Redis port:
        its replication link (and its sentinel's view of the primary) stops, nothing else."""
        _nft(
            f"table netdev {replica.table} {{\n"
            f'  chain sent {{ type filter hook ingress device "{replica.link}" priority 0; '
            f"ip daddr {primary.ip} tcp dport 6379 drop; }}\n"
            f'  chain received {{ type filter hook egress device "{replica.link}" priority 0; '
            f"ip saddr {primary.ip} tcp sport 6379 drop; }}\n"
            "}\n"
        )
        self.frozen[replica.name] = "replication"

    def heal(self, host: Host) -> None:
        if self.frozen.pop(host.name, None) is not None:
            _nft(f"delete table netdev {host.table}\n", check=False)

    def kill_host(self, host: Host) -> list[int]:
        """kill -9 of every process in the host's namespace at once; returns their pids."""
        pids = namespace_pids(host)
        kill_pids(pids)
        return pids
