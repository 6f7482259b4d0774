"""The web hosts behind HAProxy: the Procfile's web line on web1 and web2 (``--host`` its own
address), HAProxy on the database host (the root namespace) run from
deploy/haproxy/haproxy.cfg with only its addresses, certificate and process settings changed
(every timeout, check and option is the one deployed; the same rewrite as
tests/ops/test_web_failover.py)."""

import re
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

from django.conf import settings

from chaos.cluster.services import Cluster
from chaos.cluster.topology import DB_IP
from chaos.processes import procfile_command, wait_until

__all__ = ["HTTPS_PORT", "WEB_HOSTS", "WebFront", "web_front_start"]

WEB_HOSTS = ("web1", "web2")
WEB_PORT = 8000
HTTPS_PORT = 18443
HTTP_PORT = 18080
BACKEND = "llmops_web"
CHECK_HOST = "llmops.example.com"
"""The Host header of the template's health check: the web processes must allow it."""
TEMPLATE = Path(settings.BASE_DIR) / "deploy" / "haproxy" / "haproxy.cfg"


def _replace(text: str, pattern: str, replacement: str) -> str:
    new, found = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    if found != 1:
        raise RuntimeError(f"deploy/haproxy/haproxy.cfg: {pattern!r} found {found} times")
    return new


def haproxy_config(*, certificate: Path, stats: Path, servers: list[str]) -> str:
    text = TEMPLATE.read_text()
    text = _replace(text, r"^    log /dev/log .*$", "    log stdout format raw local0")
    for line in ("chroot .*", "user .*", "group .*", "daemon"):
        text = _replace(text, rf"^    {line}\n", "")
    text = _replace(
        text, r"^    stats socket .*$", f"    stats socket {stats} mode 600 level admin"
    )
    text = _replace(text, r"^    maxconn \d+$", "    maxconn 1000")
    text = _replace(text, r"^    bind :80$", f"    bind {DB_IP}:{HTTP_PORT}")
    text = _replace(
        text, r"^    bind :443 ssl crt \S+", f"    bind {DB_IP}:{HTTPS_PORT} ssl crt {certificate}"
    )
    lines = "".join(f"    server web{n} {address}\n" for n, address in enumerate(servers, 1))
    return _replace(text, r"^    server web\d .*\n(    server web\d .*\n)*", lines)


def server_stats(stats: Path) -> dict[str, dict[str, str]]:
    """HAProxy's ``show stat`` for the web servers, by name, through its admin socket ``stats``:
    ``status`` (UP, DOWN, ...), ``scur`` (connections open now) ... (tests/ops too)."""
    with socket.socket(socket.AF_UNIX) as admin:
        admin.settimeout(5)
        admin.connect(str(stats))
        admin.sendall(b"show stat\n")
        data = b""
        while chunk := admin.recv(65536):
            data += chunk
    header, *rows = data.decode().strip().splitlines()
    names = header.lstrip("# ").split(",")
    servers = {}
    for row in rows:
        values = dict(zip(names, row.split(","), strict=False))
        if values["pxname"] == BACKEND and values["svname"] not in ("FRONTEND", "BACKEND"):
            servers[values["svname"]] = values
    return servers


class WebFront:
    def __init__(self, stats: Path, certificate: Path) -> None:
        self.stats = stats
        self.tls = ssl.create_default_context(cafile=str(certificate))
        self.ws_url = f"wss://{DB_IP}:{HTTPS_PORT}"

    def servers(self) -> dict[str, dict[str, str]]:
        """HAProxy's ``show stat`` of the web servers by name (``status``, ``scur``...)."""
        return server_stats(self.stats)

    def all_up(self) -> bool:
        return {row["status"] for row in self.servers().values()} == {"UP"}


def web_front_start(cluster: Cluster) -> WebFront:
    """The web line on each web host and HAProxy before them; returns once both are UP."""
    log_dir = cluster.stack.log_dir
    addresses = []
    for name in WEB_HOSTS:
        host = cluster.topology[name]
        args = procfile_command("web")
        args[args.index("--host") + 1] = host.ip
        args[args.index("--port") + 1] = str(WEB_PORT)
        allowed = f"DJANGO_ALLOWED_HOSTS={CHECK_HOST},{DB_IP},localhost"
        cluster.stack.start(f"web@{name}", host.exec_args(["env", allowed, *args]))
        addresses.append(f"{host.ip}:{WEB_PORT}")
    key, cert = log_dir / "tls-key.pem", log_dir / "tls-cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", key, "-out", cert, "-subj", f"/CN={DB_IP}",
         "-addext", f"subjectAltName=IP:{DB_IP}"],
        check=True, capture_output=True,
    )  # fmt: skip
    bundle = log_dir / "tls-bundle.pem"
    bundle.write_text(cert.read_text() + key.read_text())
    stats = log_dir / "haproxy.sock"
    config = log_dir / "haproxy.cfg"
    config.write_text(haproxy_config(certificate=bundle, stats=stats, servers=addresses))
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    cluster.stack.start("haproxy", [binary, "-db", "-f", str(config)])
    front = WebFront(stats, cert)
    if not wait_until(front.all_up, timeout=90, every=0.5):
        raise RuntimeError(f"the web hosts are not up behind HAProxy:\n{cluster.stack.log_tails()}")
    return front
