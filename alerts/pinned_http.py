"""HTTP to addresses looked up and checked beforehand (an API consumer's callback).

A check of a name's addresses followed by a client that looks the name up again can be passed by a
name whose answer changes in between (DNS rebinding): public at the check, 127.0.0.1 at the
connection. A ``pinned_client`` connects only to the addresses it is given, whatever host a
request names, and the URL keeps its name: the ``Host`` header, the TLS server name (SNI) and
the certificate check are the name's, as without pinning.
"""

from collections.abc import Iterable, Sequence

import httpcore
import httpx

from alerts.targets import IPAddress

__all__ = ["pinned_client"]


class _PinnedBackend(httpcore.SyncBackend):
    """Connects to the pinned addresses in turn (as ``socket.create_connection`` tries each
    address of a name), never to the request's host looked up again."""

    def __init__(self, addresses: Sequence[IPAddress]) -> None:
        if not addresses:
            raise ValueError("a pinned client needs at least one address")
        self.addresses = tuple(addresses)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        error: Exception | None = None
        for address in self.addresses:
            try:
                return super().connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error


def pinned_client(
    *, addresses: Sequence[IPAddress], timeout: float, headers: dict[str, str] | None = None
) -> httpx.Client:
    """An httpx client whose every connection goes to ``addresses``. No proxy from the
    environment: a proxy would look the name up again itself."""
    transport = httpx.HTTPTransport()
    # httpx takes no network backend; its transport keeps its request, response and error
    # mapping around an httpcore pool, which does (httpcore's public API). Same TLS context as
    # httpx's default: certifi, or SSL_CERT_FILE / SSL_CERT_DIR.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        network_backend=_PinnedBackend(addresses),
    )
    return httpx.Client(transport=transport, timeout=timeout, headers=headers, trust_env=False)
