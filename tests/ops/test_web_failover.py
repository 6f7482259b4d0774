"""A web host goes away (issue 39): two web processes (the Procfile's web line, without the respawn
wrapper: a host that is gone does not come back) behind HAProxy run from
deploy/haproxy/haproxy.cfg, a real llm worker streaming a job slowly from the fake provider,
MariaDB and Redis. A client's socket on the host that goes away breaks for real; the client
reconnects through HAProxy with ``?job=<id>&offset=<characters it has>`` and hears the rest of
the text and the job's end, exactly once. New requests succeed meanwhile, and HAProxy's health
check takes the dead host out.

Two ways to go away: killed (-9: the kernel closes its connections) and frozen (SIGSTOP: its
connections stay open and silent, as after a power loss or a network cut, until the health
check marks it down and HAProxy closes them, ``on-marked-down shutdown-sessions``).
"""

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos.cluster.web_hosts import server_stats
from jobs.models import LlmJob
from keys.testing import api_key_for
from llmops.queues import LLM_QUEUE
from tests.conftest import ROOT, FakeProvider, _free_port, procfile_command, submit
from tests.jobs.test_reconciler import _env_for_subprocess
from tests.jobs.test_takeover import (  # noqa: F401  (fixture)
    Processes,
    processes,
    wait_for,
    worker_env,
)

websockets = pytest.importorskip("websockets.sync.client")
ConnectionClosed = pytest.importorskip("websockets.exceptions").ConnectionClosed

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices"),
    pytest.mark.slow,
]

TEMPLATE = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
FINAL = ("completed", "failed", "cancelled")
CHECK_HOST = "llmops.example.com"
"""The Host the template's health check sends: the web processes must allow it."""

# 3,000 tokens at 300 a second: a 10-second stream of 12,000 characters (four a token), long
# enough for a kill, a reconnect and a health check to fall within it.
STREAM_TOKENS = 3000
TOKENS_PER_SECOND = 300
CHARACTERS_BEFORE_THE_LOSS = 2000


def haproxy_binary() -> str:
    found = shutil.which("haproxy", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))
    if found is None:
        pytest.skip("HAProxy is not installed (scripts/system-deps.sh installs Debian's haproxy)")
    return found


def _replace(text: str, pattern: str, replacement: str, *, count: int = 1) -> str:
    """``re.sub`` that fails loudly when the template no longer has what the test replaces."""
    new, found = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    assert found == count, f"deploy/haproxy/haproxy.cfg: {pattern!r} found {found} times"
    return new


def haproxy_config(
    *, http_port: int, https_port: int, certificate: Path, stats: Path, web_ports: list[int]
) -> str:
    """The template with only the addresses, the certificate and the process settings of its
    global section (user, chroot, logs, connection limit) changed: every timeout, check and
    option is the one deployed."""
    text = TEMPLATE.read_text()
    text = _replace(text, r"^    log /dev/log .*$", "    log stdout format raw local0")
    for line in ("chroot .*", "user .*", "group .*", "daemon"):
        text = _replace(text, rf"^    {line}\n", "")
    text = _replace(
        text, r"^    stats socket .*$", f"    stats socket {stats} mode 600 level admin"
    )
    # Two files a connection: more than a test machine's limit may allow.
    text = _replace(text, r"^    maxconn \d+$", "    maxconn 1000")
    text = _replace(text, r"^    bind :80$", f"    bind 127.0.0.1:{http_port}")
    text = _replace(
        text,
        r"^    bind :443 ssl crt \S+",
        f"    bind 127.0.0.1:{https_port} ssl crt {certificate}",
    )
    servers = "".join(
        f"    server web{number} 127.0.0.1:{port}\n" for number, port in enumerate(web_ports, 1)
    )
    return _replace(text, r"^    server web\d .*\n(    server web\d .*\n)*", servers)


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """(the PEM HAProxy serves: certificate and key; the certificate alone, for the client)."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    bundle = folder / "llmops.pem"
    bundle.write_text(cert.read_text() + key.read_text())
    return bundle, cert


@dataclass
class Stack:
    """HAProxy in front of the web hosts, each a process group of its own."""

    url: str
    ws_url: str
    stats: Path
    tls: ssl.SSLContext
    hosts: dict[str, subprocess.Popen[bytes]]
    logs: list[Path] = field(default_factory=list)
    down_at: dict[str, float] = field(default_factory=dict)

    def status(self) -> dict[str, str]:
        return {name: row["status"] for name, row in server_stats(self.stats).items()}

    def holding(self) -> str:
        """The one web host with an open connection (the client's socket)."""
        open_now = {name: int(row["scur"] or 0) for name, row in server_stats(self.stats).items()}
        holding = [name for name, count in open_now.items() if count > 0]
        assert len(holding) == 1, open_now
        return holding[0]

    def watch_for_down(self, name: str) -> threading.Event:
        """Set once HAProxy marks ``name`` down; ``down_at[name]`` says when (monotonic)."""
        down = threading.Event()

        def watch() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if self.status()[name].startswith("DOWN"):
                    self.down_at[name] = time.monotonic()
                    down.set()
                    return
                time.sleep(0.05)

        threading.Thread(target=watch, daemon=True).start()
        return down

    def output(self) -> str:
        return "\n".join(
            f"--- {log.name} ---\n{log.read_text(errors='replace')[-4000:]}" for log in self.logs
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(timeout=10)


@pytest.fixture
def stack(transactional_db: None, tmp_path: Path) -> Iterator[Stack]:
    binary = haproxy_binary()
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed for the load balancer's test certificate")
    env = _env_for_subprocess()
    env["WEB_CONCURRENCY"] = "2"
    env["DJANGO_ALLOWED_HOSTS"] = f"{CHECK_HOST},127.0.0.1,localhost"
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    web_line = procfile_command("web")
    # Without the respawn wrapper: a host that is gone stays gone.
    web_line = web_line[web_line.index("--") + 1 :]
    started: list[subprocess.Popen[bytes]] = []
    hosts: dict[str, subprocess.Popen[bytes]] = {}
    logs: list[Path] = []
    web_ports = [_free_port(), _free_port()]
    try:
        for number, port in enumerate(web_ports, 1):
            args = list(web_line)
            args[args.index("--port") + 1] = str(port)
            log = tmp_path / f"web{number}.log"
            with log.open("wb") as out:
                host = subprocess.Popen(
                    args, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True
                )
            started.append(host)
            hosts[f"web{number}"] = host
            logs.append(log)
        bundle, certificate = self_signed_certificate(tmp_path)
        stats = tmp_path / "haproxy.sock"
        http_port, https_port = _free_port(), _free_port()
        config = tmp_path / "haproxy.cfg"
        config.write_text(
            haproxy_config(
                http_port=http_port,
                https_port=https_port,
                certificate=bundle,
                stats=stats,
                web_ports=web_ports,
            )
        )
        log = tmp_path / "haproxy.log"
        logs.append(log)
        with log.open("wb") as out:
            # -db: in the foreground, a child of this test.
            balancer = subprocess.Popen(
                [binary, "-db", "-f", str(config)],
                stdout=out, stderr=out, start_new_session=True,
            )  # fmt: skip
        started.append(balancer)
        tls = ssl.create_default_context(cafile=str(certificate))
        url = f"https://127.0.0.1:{https_port}"
        built = Stack(
            url=url,
            ws_url=url.replace("https://", "wss://"),
            stats=stats,
            tls=tls,
            hosts=hosts,
            logs=logs,
        )

        def every_host_up() -> bool:
            for process in started:
                assert process.poll() is None, built.output()
            try:
                return set(built.status().values()) == {"UP"}
            except OSError:
                return False

        wait_for(every_host_up, timeout=60, what="both web hosts up behind HAProxy", every=0.2)
        yield built
    finally:
        for process in started:
            _stop(process)


@dataclass
class Heard:
    """What the client heard of one job over its sockets."""

    text: str = ""
    deltas: list[dict[str, Any]] = field(default_factory=list)
    ends: list[dict[str, Any]] = field(default_factory=list)
    other: list[dict[str, Any]] = field(default_factory=list)

    def take(self, event: dict[str, Any]) -> None:
        if event["type"] == "job.delta":
            # Every piece must start exactly where the text so far ends: no gap, no repeat.
            assert event["offset"] == len(self.text), (event["offset"], len(self.text))
            assert event["attempt"] == 1, event
            self.deltas.append(event)
            self.text += event["text"]
        elif event["type"] == "job.updated" and event["job"]["status"] in FINAL:
            self.ends.append(event)
        else:
            self.other.append(event)


def _open(stack: Stack, job: LlmJob, key: str, offset: int) -> Any:
    return websockets.connect(
        f"{stack.ws_url}/ws/jobs/?job={job.id}&offset={offset}",
        subprotocols=["token", key],
        ssl=stack.tls,
        open_timeout=10,
    )


def _slow_stream(fake_provider: FakeProvider) -> None:
    fake_provider.http.post(
        "/_fake/faults", json={"stream_tokens_per_second": TOKENS_PER_SECOND}
    ).raise_for_status()


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_socket_on_a_lost_web_host_resumes_on_the_other_and_hears_the_rest_exactly_once(
    how,
    alice,
    alice_client,
    fake_provider,
    stack,
    processes,  # noqa: F811
):
    _slow_stream(fake_provider)
    key = api_key_for(alice)
    job = submit(
        alice_client,
        max_tokens=STREAM_TOKENS,
        messages=[{"role": "user", "content": f"Write it. fake_output_tokens={STREAM_TOKENS}"}],
    )
    env = worker_env(fake_provider, LLM_RATE_LIMIT_ENABLED="False", LLM_HEARTBEAT_SECONDS="1")
    processes.start(env, "rqworker", LLM_QUEUE, "--burst")
    heard = Heard()

    # 1. A socket through HAProxy, from offset 0, until some of the text has come.
    with _open(stack, job, key, 0) as first:
        while len(heard.text) < CHARACTERS_BEFORE_THE_LOSS:
            heard.take(json.loads(first.recv(timeout=30)))
        assert not heard.ends, "the stream ended before the host was lost: make it slower"
        lost = stack.holding()
        survivor = next(name for name in stack.hosts if name != lost)

        # 2. Its host goes away.
        lost_at = time.monotonic()
        host = stack.hosts[lost]
        os.killpg(host.pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        marked_down = stack.watch_for_down(lost)
        try:
            while True:
                heard.take(json.loads(first.recv(timeout=30)))
        except ConnectionClosed as closed:
            broken_at = time.monotonic()
            # Broken, not closed by the server: no close frame came.
            assert closed.rcvd is None, closed
        except TimeoutError:
            pytest.fail(f"the socket on the {how} host stayed open and silent\n{stack.output()}")
    had = len(heard.text)
    assert had < STREAM_TOKENS * 4 and not heard.ends, "the loss came too late to test anything"

    # 3. The client resumes through HAProxy from what it has.
    try:
        second = _open(stack, job, key, had)
    except TimeoutError:
        pytest.fail(
            f"the handshake through HAProxy took over 10 s, {time.monotonic() - lost_at:.2f} s "
            f"after the loss; HAProxy: {stack.status()}\n{stack.output()}"
        )
    with second:
        reopened_at = time.monotonic()
        assert stack.holding() == survivor
        first_piece_at = None
        while not heard.ends:
            heard.take(json.loads(second.recv(timeout=30)))
            if first_piece_at is None:
                first_piece_at = time.monotonic()
        # Nothing after the end: no second end, no text again.
        try:
            extra = second.recv(timeout=1.5)
        except TimeoutError:
            extra = None
        assert extra is None, extra

    job.refresh_from_db()
    assert job.status == "completed", job.error_message
    assert heard.text == job.output_text and len(heard.text) == STREAM_TOKENS * 4
    (end,) = heard.ends
    assert end["job"]["status"] == "completed" and end["job"]["output"]["text"] == job.output_text
    # Besides: the job's start, heard by the first socket (opened before the worker took it).
    assert {(event["type"], event["job"]["status"]) for event in heard.other} <= {
        ("job.updated", "running")
    }, heard.other

    # 4. HAProxy's check took the lost host out, and new requests go to the survivor.
    assert marked_down.wait(timeout=10), f"HAProxy never marked {lost} down\n{stack.output()}"
    down_at = stack.down_at[lost]
    with httpx.Client(base_url=stack.url, verify=stack.tls, timeout=10) as http:
        answers = [
            http.get("/api/v1/me/", headers={"Authorization": f"Bearer {key}"}).status_code
            for _ in range(20)
        ]
    assert answers == [200] * 20, answers
    assert stack.status()[survivor] == "UP"
    print(
        f"\n{how}: socket broken after {broken_at - lost_at:.2f} s, reopened on {survivor} "
        f"after {reopened_at - lost_at:.2f} s, first resumed text after "
        f"{(first_piece_at or reopened_at) - lost_at:.2f} s; {had} of {len(heard.text)} "
        f"characters before the loss, {len(heard.deltas)} deltas; {lost} marked down by "
        f"{down_at - lost_at:.2f} s"
    )
