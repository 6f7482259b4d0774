"""A callback connects to the addresses its check saw (alerts/pinned_http.py): a name that answers
a public address to the check and 127.0.0.1 afterwards (DNS rebinding) never reaches this
machine; an allowed callback still gets its request with the name's Host header, and over TLS
the name's server name and a certificate checked against the name.

The names are a fake resolver (``socket.getaddrinfo`` answering for the test's names only) and
"the internet" a stand-in (``socket.create_connection`` sends the public address to a local
listener, or refuses it): nothing leaves the machine."""

import datetime
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from alerts.delivery import DeliveryError, json_body
from webhooks.sending import post_callback

PUBLIC = "93.184.216.34"
"""A public address (``is_global``), never connected to: the stand-in network routes or refuses
it."""
PAYLOAD = {"type": "batch.finished", "batch": {"id": "b1"}}


class Listener:
    """An HTTP(S) server on 127.0.0.1 that records each request and answers 200."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.server_names: list[str | None] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                listener.requests.append(
                    {"path": self.path, "host": self.headers["Host"], "json": json.loads(raw)}
                )
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            tls.sni_callback = lambda _socket, name, _context: self.server_names.append(name)
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Names:
    """A resolver for the test's names; every other name goes to the real one."""

    def __init__(self) -> None:
        self.answers: dict[str, list[str]] = {}
        self.lookups: list[str] = []
        self.real = socket.getaddrinfo

    def answer(self, name: str, answers: list[str]) -> None:
        """Each lookup of ``name`` gets the next answer; the last one repeats."""
        self.answers[name] = list(answers)

    def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in self.answers:
            return self.real(host, port, *args, **kwargs)
        self.lookups.append(host)
        pending = self.answers[host]
        address = pending.pop(0) if len(pending) > 1 else pending[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port or 0))]


class Network:
    """Where a connection to a public address goes: to 127.0.0.1 (a route) or nowhere."""

    def __init__(self) -> None:
        self.routes: dict[str, str] = {}
        self.unreachable: set[str] = set()
        self.attempts: list[tuple[str, int]] = []
        self.real = socket.create_connection

    def create_connection(self, address: tuple[str, int], *args: Any, **kwargs: Any) -> Any:
        host, port = address
        self.attempts.append((host, port))
        if host in self.unreachable:
            raise ConnectionRefusedError(f"{host} is not reachable from the tests")
        return self.real((self.routes.get(host, host), port), *args, **kwargs)


@pytest.fixture
def names(monkeypatch: pytest.MonkeyPatch) -> Names:
    resolver = Names()
    monkeypatch.setattr(socket, "getaddrinfo", resolver.getaddrinfo)
    return resolver


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> Network:
    stand_in = Network()
    monkeypatch.setattr(socket, "create_connection", stand_in.create_connection)
    return stand_in


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def short_timeout(settings: Any) -> None:
    settings.ALERT_DELIVERY_TIMEOUT = 5


def test_a_name_that_answers_127_0_0_1_after_the_check_never_reaches_it(
    names, network, listener, settings
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = False
    names.answer("rebind.example", [PUBLIC, "127.0.0.1"])
    network.unreachable.add(PUBLIC)

    with pytest.raises(DeliveryError) as failed:
        post_callback(url=f"http://rebind.example:{listener.port}/hook", body=json_body(PAYLOAD))

    assert listener.requests == []
    assert names.lookups == ["rebind.example"]  # once: the check's answer is the one used
    assert network.attempts == [(PUBLIC, listener.port)]
    assert failed.value.retryable and "ConnectError" in str(failed.value)


def test_an_allowed_callback_gets_its_request_at_the_checked_address_with_its_host(
    names, network, listener, settings
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = False
    names.answer("callback.example", [PUBLIC])
    network.routes[PUBLIC] = "127.0.0.1"

    post_callback(
        url=f"http://callback.example:{listener.port}/hook?token=t", body=json_body(PAYLOAD)
    )

    assert listener.requests == [
        {"path": "/hook?token=t", "host": f"callback.example:{listener.port}", "json": PAYLOAD}
    ]
    assert network.attempts == [(PUBLIC, listener.port)]


def test_a_name_on_a_private_network_is_refused_for_good_without_a_connection(
    names, network, listener, settings
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = False
    names.answer("inside.example", ["127.0.0.1"])

    with pytest.raises(DeliveryError, match="private, local or reserved") as refused:
        post_callback(url=f"http://inside.example:{listener.port}/", body=json_body(PAYLOAD))

    assert not refused.value.retryable
    assert network.attempts == [] and listener.requests == []


def test_with_private_hosts_allowed_a_loopback_name_is_reached_at_the_address_looked_up(
    names, network, listener, settings
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True  # make run, and the batch tests' receivers
    names.answer("receiver.example", ["127.0.0.1"])

    post_callback(url=f"http://receiver.example:{listener.port}/done", body=json_body(PAYLOAD))

    assert [r["host"] for r in listener.requests] == [f"receiver.example:{listener.port}"]
    assert network.attempts == [("127.0.0.1", listener.port)]


def _certificate_authority(tmp_path: Path, server_name: str) -> tuple[Path, tuple[Path, Path]]:
    """A test CA's certificate file, and a certificate and key for ``server_name`` it signed."""
    now = datetime.datetime.now(datetime.UTC)

    def certificate(
        subject: str, key: Any, issuer: str, issuer_key: Any, *, ca: bool
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                critical=False,
            )
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        else:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False
            ).add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, server_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca_file.write_bytes(
        certificate("Test CA", ca_key, "Test CA", ca_key, ca=True).public_bytes(
            serialization.Encoding.PEM
        )
    )
    cert_file.write_bytes(
        certificate(server_name, server_key, "Test CA", ca_key, ca=False).public_bytes(
            serialization.Encoding.PEM
        )
    )
    key_file.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_file, (cert_file, key_file)


@pytest.fixture
def tls_listener(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    """An HTTPS listener with a certificate for callback.example from a CA the client trusts."""
    ca_file, (cert_file, key_file) = _certificate_authority(tmp_path, "callback.example")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # httpx's default context reads it
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    server = Listener(tls=context)
    yield server
    server.close()


def test_over_tls_the_name_is_the_server_name_and_its_certificate_is_checked(
    names, network, tls_listener, settings
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = False
    names.answer("callback.example", [PUBLIC])
    names.answer("impostor.example", [PUBLIC])
    network.routes[PUBLIC] = "127.0.0.1"
    port = tls_listener.port

    post_callback(url=f"https://callback.example:{port}/hook", body=json_body(PAYLOAD))
    with pytest.raises(DeliveryError, match="CERTIFICATE_VERIFY_FAILED"):
        # Same address, another name: the certificate is checked against the name.
        post_callback(url=f"https://impostor.example:{port}/hook", body=json_body(PAYLOAD))

    assert [r["host"] for r in tls_listener.requests] == [f"callback.example:{port}"]
    assert tls_listener.server_names == ["callback.example", "impostor.example"]
