"""One cluster drill, start to end: clean what an earlier run left, build the hosts, start the
services on them, run the scenarios one after another, and report; whatever happens (a
failure, Ctrl-C, SIGTERM), every process started is stopped and the hosts are removed."""

import fcntl
import os
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from chaos import events
from chaos.checks import Check
from chaos.cluster.checks import scenario_checks
from chaos.cluster.failover import redis_kill_scenario
from chaos.cluster.failover_checks import redis_kill_checks
from chaos.cluster.mixed import mixed_checks, mixed_kill_scenario
from chaos.cluster.rate_limit import rate_limit_checks, rate_limit_scenario
from chaos.cluster.redis_hosts import PRIMARY_HOST, SENTINEL_HOSTS
from chaos.cluster.scenarios import ScenarioRecord, freeze_scenario, kill_scenario
from chaos.cluster.services import Cluster
from chaos.cluster.topology import PATHS, Topology, clean, netns_allowed
from chaos.cluster.web_hosts import web_front_start
from chaos.cluster.web_kill import web_kill_checks, web_kill_scenario
from chaos.drill import _quiet_logs, _sigterm_as_interrupt
from chaos.safety import Refused, production_signs
from chaos.setup import drill_budget_create, drill_budget_remove, drill_user_ensure

__all__ = ["ClusterOptions", "ClusterReport", "run_cluster_drill"]


@dataclass
class ClusterOptions:
    paths: tuple[str, ...] = PATHS
    """The paths frozen, one scenario each, in this order."""
    kill: bool = True
    """Then kill every process on a worker host at once."""
    mixed: bool = True
    """Then kill every process on a worker host under a mixed load (chaos/cluster/mixed.py)."""
    redis_kill: bool = True
    """Then kill the Redis primary under Sentinel (its jobs waiting: ``waiting`` x 2)."""
    waiting: int = 4
    web_kill: bool = True
    """Then kill the web host holding most of ``sockets`` WebSockets behind HAProxy."""
    sockets: int = 6
    rate_limit: bool = True
    """Then the provider enforcing ``rpm`` with llm workers on w1, w2 and w3 and a backlog:
    the limiter's use of the limit over ``rate_seconds`` (over 60 s, then over any 5 s too)."""
    rpm: int = 120
    rate_seconds: float = 120.0
    calls: int = 8
    call_seconds: float = 12.0
    freeze_seconds: float = 70.0
    seed: int = 7
    log_dir: Path | None = None
    yes_really: bool = False


@dataclass
class ClusterReport:
    options: ClusterOptions
    scenarios: list[tuple[ScenarioRecord, list[Check]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log_dir: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        checks = [check for _, checks in self.scenarios for check in checks]
        return bool(checks) and all(check.passed for check in checks)

    def lines(self) -> list[str]:
        out = [
            f"LLM cluster drill on {socket.gethostname()} ({len(os.sched_getaffinity(0))} cores, "
            f"Python {sys.version.split()[0]}); logs in {self.log_dir}",
            "hosts: db (root namespace: MariaDB through a forwarder, fake provider), redis1 "
            "(primary), redis2 (replica), a sentinel on each of redis1-3, w1 w2 w3 (llm "
            "workers, agents workers in the mixed load; reconciler, monitor and worker_default "
            "on w3), web1 web2 (the web line) "
            "behind HAProxy on db; every timing knob at its "
            "default",
        ]
        out += [f"note: {note}" for note in self.notes]
        failed = []
        for record, checks in self.scenarios:
            out.append(f"== {record.name}: {record.description}")
            out += [f"   note: {note}" for note in record.notes]
            width = max(len(check.name) for check in checks)
            for check in checks:
                out.append(
                    f"{'PASS' if check.passed else 'FAIL'}  {check.name:<{width}}  {check.figures}"
                )
                if not check.passed:
                    failed.append(f"{record.name}: {check.name}")
        total = sum(len(checks) for _, checks in self.scenarios)
        minutes, seconds = divmod(int(self.seconds), 60)
        verdict = "PASSED" if self.passed else f"FAILED ({'; '.join(failed) or 'no scenario'})"
        out.append(
            f"cluster drill {verdict}: {total - len(failed)}/{total} checks passed, "
            f"{len(self.scenarios)} scenarios, {minutes} min {seconds:02d} s"
        )
        return out


def _check_redis_url(cluster: Cluster) -> None:
    if settings.REDIS_URL != cluster.redis_url:
        raise Refused(
            f"the drill's own process submits through the cluster's Redis: run it with "
            f"REDIS_URL={cluster.redis_url} (make cluster-drill does), not {settings.REDIS_URL}"
        )


LOCK = Path(tempfile.gettempdir()) / "llmops-cluster-drill.lock"
"""One cluster drill at a time on a machine: its hosts, links and processes have fixed names, and
each run's start clears what it takes for an earlier run's leftovers."""
OTHER_DRILL_WAIT_SECONDS = 900.0


@contextmanager
def _alone_on_the_machine(say: Callable[[str], None]) -> Iterator[None]:
    """Hold the machine's drill lock; wait (at most OTHER_DRILL_WAIT_SECONDS) while another
    drill holds it, rather than tear its hosts down under it."""
    with LOCK.open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            say(f"another cluster drill runs on this machine (pid {lock.read().strip() or '?'}):"
                " waiting for it to end")  # fmt: skip
            deadline = time.monotonic() + OTHER_DRILL_WAIT_SECONDS
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise Refused(
                            f"another cluster drill held {LOCK} for {OTHER_DRILL_WAIT_SECONDS:g} s"
                        ) from None
                    time.sleep(1)
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        yield


def run_cluster_drill(options: ClusterOptions, *, say: Callable[[str], None]) -> ClusterReport:
    """Raises Refused before touching anything where the drill cannot or should not run."""
    reason = netns_allowed()
    if reason:
        raise Refused(reason)
    log_dir = options.log_dir or Path(tempfile.mkdtemp(prefix="llm_cluster-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    report = ClusterReport(options=options, log_dir=str(log_dir))
    topology = Topology()
    database = settings.DATABASES["default"]["NAME"]
    cluster = Cluster(topology, database=database, log_dir=log_dir, run_id=uuid.uuid4().hex)
    _check_redis_url(cluster)
    started = time.monotonic()
    with (
        _alone_on_the_machine(say),
        _sigterm_as_interrupt(),
        _quiet_logs(),
        ExitStack() as cleanup,
    ):
        left = clean()
        if left:
            report.notes.append("removed an earlier run's leftovers: " + ", ".join(left))
        cleanup.callback(clean)
        topology.build()
        cleanup.callback(cluster.stack.stop)
        provider = cluster.start_services(latency_ms="100-400", seed=options.seed)
        # Looked at once the drill's own Redis answers (the database's signs are what matter).
        signs = production_signs()
        if signs and not options.yes_really:
            raise Refused("this looks like a system in use:\n  - " + "\n  - ".join(signs))
        report.notes += [f"overridden by --yes-really: {sign}" for sign in signs]
        earlier = events.unfinished_jobs()
        if earlier:
            report.notes.append(
                f"{len(earlier)} jobs were not final before the drill; its workers run them too "
                "(their calls and rows are counted with each scenario's bill)"
            )
        user = drill_user_ensure()
        budget = drill_budget_create(user=user)
        cleanup.callback(drill_budget_remove, budget_id=budget.id)
        cluster.start_loops()
        say(
            f"hosts up: provider {cluster.provider_url}, Redis primary on "
            f"{topology[PRIMARY_HOST].ip}, sentinels on {', '.join(SENTINEL_HOSTS)}, "
            f"database {database} through {cluster.provider_url.split('//')[1].split(':')[0]}"
            f":3306 (logs in {log_dir})"
        )
        for path in options.paths:
            record = freeze_scenario(
                cluster, provider, user, path=path, calls=options.calls,
                call_seconds=options.call_seconds, freeze_seconds=options.freeze_seconds,
                earlier_jobs=earlier, say=say,
            )  # fmt: skip
            report.scenarios.append((record, scenario_checks(record)))
            say(
                "; ".join(
                    f"{'PASS' if c.passed else 'FAIL'} {c.name}" for c in report.scenarios[-1][1]
                )
            )
        if options.kill:
            record = kill_scenario(
                cluster, provider, user, calls=options.calls, call_seconds=options.call_seconds,
                earlier_jobs=earlier, say=say,
            )  # fmt: skip
            report.scenarios.append((record, scenario_checks(record)))
        if options.mixed:
            mixed = mixed_kill_scenario(
                cluster, provider, user, budget_id=budget.id, earlier_jobs=earlier, say=say
            )
            report.scenarios.append((mixed.record, mixed_checks(mixed)))
        if options.redis_kill:
            record = redis_kill_scenario(
                cluster, provider, user, waiting=options.waiting,
                call_seconds=options.call_seconds, earlier_jobs=earlier, say=say,
            )  # fmt: skip
            report.scenarios.append((record, redis_kill_checks(record)))
        if options.web_kill:
            front = web_front_start(cluster)
            record, clients = web_kill_scenario(
                cluster, provider, front, user, sockets=options.sockets, earlier_jobs=earlier,
                say=say,
            )  # fmt: skip
            report.scenarios.append((record, web_kill_checks(record, clients)))
        if options.rate_limit:
            record, rounds = rate_limit_scenario(
                cluster, provider, user, rpm=options.rpm, seconds=options.rate_seconds, say=say
            )
            report.scenarios.append((record, rate_limit_checks(rounds)))
        died = cluster.stack.died()
        if died:
            report.notes.append("processes that died on their own: " + ", ".join(died))
    report.seconds = time.monotonic() - started
    return report
