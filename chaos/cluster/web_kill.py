"""A web host killed with sockets open: WebSockets through HAProxy on slowly streaming jobs,
then ``kill -9`` of every process on the web host holding most of them. Each client resumes
through HAProxy with ``?job=<id>&offset=<characters it has>``, as a browser does, and must hear
the rest of the text exactly once and one end event (docs/deploy.md#several-web-hosts-behind-a-
load-balancer); the job's text in the database is the reference."""

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.contrib.auth.models import User
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from chaos.checks import Check
from chaos.cluster.checks import _completed, _money, _stuck
from chaos.cluster.scenarios import (
    QUICK_LATENCY_MS,
    ScenarioRecord,
    _collect,
    _submit_stream,
    _watch,
)
from chaos.cluster.services import Cluster
from chaos.cluster.web_hosts import WebFront
from chaos.processes import wait_until
from chaos.provider import FakeProvider
from jobs.models import LlmJob
from keys.testing import api_key_for

__all__ = ["web_kill_checks", "web_kill_scenario"]

STREAM_TOKENS = 6000
TOKENS_PER_SECOND = 300
"""A 20-second stream of 24,000 characters: the kill and the reconnects fall within it."""
CHARACTERS_BEFORE_THE_KILL = 1000
FINAL = ("completed", "failed", "cancelled")


@dataclass
class Client:
    job_id: str
    text: str = ""
    repeated: int = 0
    """Characters a delta brought again (its offset before the end of the text so far)."""
    gaps: int = 0
    ends: int = 0
    after_end: int = 0
    reconnects: int = 0
    errors: list[str] = field(default_factory=list)


def _listen(front: WebFront, key: str, client: Client, deadline: float) -> None:
    while client.ends == 0 and time.time() < deadline:
        url = f"{front.ws_url}/ws/jobs/?job={client.job_id}&offset={len(client.text)}"
        try:
            with connect(url, subprotocols=["token", key], ssl=front.tls, open_timeout=10) as ws:  # type: ignore[list-item]
                while client.ends == 0:
                    client_take(client, json.loads(ws.recv(timeout=60)))
                try:
                    while True:
                        ws.recv(timeout=1.5)
                        client.after_end += 1
                except TimeoutError:
                    return
        except (ConnectionClosed, OSError, TimeoutError) as error:
            client.reconnects += 1
            client.errors.append(type(error).__name__)
            time.sleep(0.2)


def client_take(client: Client, event: dict) -> None:  # type: ignore[type-arg]
    if event["type"] == "job.delta":
        offset, text = int(event["offset"]), event["text"]
        if offset > len(client.text):
            client.gaps += offset - len(client.text)
            client.text += "\0" * (offset - len(client.text))
        overlap = len(client.text) - offset
        client.repeated += min(overlap, len(text))
        client.text += text[overlap:]
    elif event["type"] == "job.updated" and event["job"]["status"] in FINAL:
        client.ends += 1


def web_kill_scenario(
    cluster: Cluster, provider: FakeProvider, front: WebFront, user: User, *, sockets: int,
    earlier_jobs: set[str], say: Callable[[str], None],
) -> tuple[ScenarioRecord, list[Client]]:  # fmt: skip
    worker = cluster.topology["w1"]
    record = ScenarioRecord(
        name="kill-web-host",
        description=f"{sockets} WebSockets through HAProxy on jobs streaming {STREAM_TOKENS} "
        f"tokens at {TOKENS_PER_SECOND}/s (llm worker on {worker.name}), every process on the "
        "web host holding most of them killed at once",
        victim="",
        started=time.time(),
        earlier_jobs=earlier_jobs,
    )
    provider.http.post("/_fake/reset").raise_for_status()
    provider.configure(faults={}, latency_ms=QUICK_LATENCY_MS)
    provider.settings(stream_tokens_per_second=TOKENS_PER_SECOND)
    key = api_key_for(user, name="cluster drill sockets")
    cluster.start_worker(worker)
    wait_until(lambda: cluster.worker_registered(worker), timeout=90, every=0.5)
    clients = []
    for index in range(sockets):
        job_id = _submit_stream(
            user, index, feature="cluster-sockets", model="claude-haiku-4-5", tokens=STREAM_TOKENS
        )
        record.long_jobs.append(job_id)
        clients.append(Client(job_id))
    deadline = time.time() + 180
    threads = [
        threading.Thread(target=_listen, args=(front, key, c, deadline), daemon=True)
        for c in clients
    ]
    for thread in threads:
        thread.start()
    if not wait_until(
        lambda: all(len(c.text) >= CHARACTERS_BEFORE_THE_KILL for c in clients), timeout=90
    ):
        record.notes.append("not every socket had its first characters before the kill")
    holding = {name: int(row["scur"] or 0) for name, row in front.servers().items()}
    record.victim = max(holding, key=lambda name: holding[name])
    record.killed_pids = cluster.kill_host(cluster.topology[record.victim])
    record.fault_at = time.time()
    record.notes.append(
        "sockets open per web host at the kill: "
        + ", ".join(f"{name} {count}" for name, count in sorted(holding.items()))
        + f"; characters heard before it: {sum(len(c.text) for c in clients)}"
    )
    say(f"{record.name}: killed {len(record.killed_pids)} processes on {record.victim}")
    for thread in threads:
        thread.join(timeout=max(1.0, deadline - time.time()))
    _watch(record, time.time() + 10)
    cluster.stop_worker(worker)
    _collect(cluster, provider, record)
    return record, clients


def _sockets(record: ScenarioRecord, clients: list[Client]) -> Check:
    texts = {
        str(job_id): text
        for job_id, text in LlmJob.objects.filter(id__in=record.job_ids).values_list(
            "id", "output_text"
        )
    }
    wrong = [c.job_id[:8] for c in clients if c.text != (texts.get(c.job_id) or "") or not c.text]
    repeated = sum(c.repeated for c in clients)
    gaps = sum(c.gaps for c in clients)
    ends = [c.ends + c.after_end for c in clients]
    passed = not wrong and not repeated and not gaps and all(n == 1 for n in ends)
    figures = (
        f"{len(clients)} sockets, {sum(c.reconnects for c in clients)} resumed; characters "
        f"lost {gaps}, repeated {repeated}; text equal to the database's for "
        f"{len(clients) - len(wrong)}/{len(clients)}; end events per job "
        f"{sorted(set(ends))}, events after the end {sum(c.after_end for c in clients)}"
        + (f"; wrong text: {', '.join(wrong)}" if wrong else "")
    )
    return Check("no WebSocket event lost or repeated", passed, figures)


def web_kill_checks(record: ScenarioRecord, clients: list[Client]) -> list[Check]:
    return [_sockets(record, clients), _completed(record), _stuck(record), *_money(record)]
