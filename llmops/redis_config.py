"""Where Redis is, and the options of every client of it: the one rule the settings follow.

Either one server (``REDIS_URL=redis://...``) or the primary that Redis Sentinel names:
``REDIS_SENTINELS`` (``host:port,...``) with ``REDIS_SENTINEL_MASTER`` (``REDIS_URL`` then gives
only the database number and the password), or ``REDIS_URL=redis+sentinel://...`` (the form of
Redis-Sentinel-Url and Prefect, below). The settings build ``RQ_QUEUES`` (django-rq: every queue,
worker and scheduler, and through ``runtime/redis_clients.py`` the limiter's scripts, the job
locks and every other key) and ``CHANNEL_LAYERS`` (channels-redis) from ``redis_server()``'s
answer, and the health probe (ops/health.py) rewrites ``RQ_QUEUES``' entry with ``probe_config``.

Through Sentinel, every connection asks the sentinels where the primary is when it (re)connects,
and a command whose connection failed is retried, with a backoff, for ``failover_seconds``: a
process rides through a failover (the primary killed, a replica promoted) without a restart. A
primary demoted to a replica answers writes with READONLY, which redis-py turns into a
``ConnectionError`` after dropping the connection: retried the same way, on the new primary.
What the old primary had not replicated is lost as in a flush; the database is the truth and the
reconciler enqueues the jobs again (docs/deploy.md#redis-sentinel).

Messages never hold a password: an error names the variable and the offending part only.
"""

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlparse

from django.core.exceptions import ImproperlyConfigured
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

__all__ = [
    "SENTINEL_PORT",
    "SENTINEL_SCHEME",
    "RedisServer",
    "failover_retry",
    "probe_config",
    "redis_server",
    "with_socket_timeouts",
]

SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
"""Sentinel's own port, for a sentinel named without one."""
_PLAIN_SCHEMES = ("redis", "rediss", "unix")
_FORMS = "redis://, rediss://, unix:// or redis+sentinel://host:port,.../<primary>[/<db>]"

# Backoff between retries while the sentinels fail over: 0.1 s doubling to at most 1 s, so that a
# short failover costs little and a long one a command a second.
_BACKOFF_BASE_SECONDS = 0.05
_BACKOFF_CAP_SECONDS = 1.0


@dataclass(frozen=True)
class RedisServer:
    """One Redis server (``url``) or the primary ``master`` that ``sentinels`` watch."""

    url: str = field(default="", repr=False)
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)
    failover_seconds: float = 10.0

    @property
    def through_sentinel(self) -> bool:
        return bool(self.sentinels)

    def rq_connection(self, socket_timeout: float, connect_timeout: float) -> dict[str, Any]:
        """The connection keys of a django-rq ``RQ_QUEUES`` entry."""
        if not self.through_sentinel:
            return {"URL": with_socket_timeouts(self.url, socket_timeout, connect_timeout)}
        return {
            "SENTINELS": list(self.sentinels),
            "MASTER_NAME": self.master,
            "DB": self.db,
            "USERNAME": self.username,
            "PASSWORD": self.password,
            "SOCKET_TIMEOUT": socket_timeout,
            "CONNECTION_KWARGS": {
                "socket_connect_timeout": connect_timeout,
                "retry": failover_retry(self.failover_seconds),
            },
            "SENTINEL_KWARGS": self._sentinel_kwargs(connect_timeout),
        }

    def channel_layer_host(self, socket_timeout: float, connect_timeout: float) -> dict[str, Any]:
        """One entry of channels-redis's ``hosts``."""
        options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "socket_keepalive": True,
        }
        if not self.through_sentinel:
            # Once more on a new connection: after a Redis restart each pooled one is dead.
            return {"address": self.url, **options, "retry_on_error": [RedisConnectionError]}
        return {
            "master_name": self.master,
            "sentinels": list(self.sentinels),
            "sentinel_kwargs": self._sentinel_kwargs(connect_timeout),
            "db": self.db,
            "username": self.username,
            "password": self.password,
            **options,
            "retry": failover_retry(self.failover_seconds, AsyncRetry),
        }

    def _sentinel_kwargs(self, timeout: float) -> dict[str, Any]:
        # A sentinel answers at once or not at all: its connect timeout bounds both.
        kwargs: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if self.sentinel_password:
            kwargs["password"] = self.sentinel_password
        return kwargs


def redis_server(
    url: str,
    *,
    sentinels: list[str] | None = None,
    master: str = "",
    sentinel_password: str = "",
    failover_seconds: float = 10.0,
) -> RedisServer:
    """``REDIS_URL`` with ``REDIS_SENTINELS``/``REDIS_SENTINEL_MASTER``/``REDIS_SENTINEL_PASSWORD``
    read as one; ``ImproperlyConfigured`` (naming the variable, never a secret) when they do not
    agree or do not parse."""
    sentinels = [item.strip() for item in sentinels or [] if item.strip()]
    master = master.strip()
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    common = {
        "sentinel_password": sentinel_password or None,
        "failover_seconds": failover_seconds,
    }
    if scheme == SENTINEL_SCHEME:
        if sentinels or master:
            raise ImproperlyConfigured(
                "REDIS_URL names its sentinels (redis+sentinel://): leave REDIS_SENTINELS and "
                "REDIS_SENTINEL_MASTER unset"
            )
        return _parse_sentinel_url(url, **common)
    if scheme not in _PLAIN_SCHEMES:
        raise ImproperlyConfigured(f"REDIS_URL must be {_FORMS}, not a {scheme or 'bare'} URL")
    if not sentinels and not master:
        return RedisServer(url=url)
    if not master:
        raise ImproperlyConfigured(
            "REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER is not: name the primary the "
            "sentinels watch (the <name> of their `sentinel monitor <name> ...`)"
        )
    if not sentinels:
        raise ImproperlyConfigured(
            "REDIS_SENTINEL_MASTER is set but REDIS_SENTINELS is not: list the sentinels as "
            "host:port,host:port"
        )
    if scheme != "redis":
        raise ImproperlyConfigured(
            f"REDIS_URL must be a redis:// URL with REDIS_SENTINELS (its database and password "
            f"apply to the primary), not {scheme}://"
        )
    username, password, _, path, query = _split(url)
    if query:
        raise ImproperlyConfigured(
            "REDIS_URL takes no query options with REDIS_SENTINELS: the timeouts are "
            "LLM_REDIS_SOCKET_TIMEOUT and LLM_REDIS_CONNECT_TIMEOUT"
        )
    return RedisServer(
        sentinels=tuple(_address("REDIS_SENTINELS", item) for item in sentinels),
        master=master,
        db=_db("REDIS_URL", path.strip("/") or "0"),
        username=username,
        password=password,
        **common,  # type: ignore[arg-type]
    )


def _parse_sentinel_url(url: str, **common: Any) -> RedisServer:
    """``redis+sentinel://[user:password@]host[:port][,host[:port]...]/<primary>[/<db>]``;
    a port left out is 26379."""
    username, password, hosts, path, query = _split(url)
    if query:
        raise ImproperlyConfigured(
            "REDIS_URL (redis+sentinel://) takes no query options: the sentinels' password is "
            "REDIS_SENTINEL_PASSWORD, the timeouts LLM_REDIS_SOCKET_TIMEOUT and "
            "LLM_REDIS_CONNECT_TIMEOUT"
        )
    names = [item.strip() for item in hosts.split(",") if item.strip()]
    if not names:
        raise ImproperlyConfigured(f"REDIS_URL must list its sentinels: {_FORMS}")
    master, _, db = path.strip("/").partition("/")
    if not master:
        raise ImproperlyConfigured(f"REDIS_URL must name the primary after the sentinels: {_FORMS}")
    return RedisServer(
        sentinels=tuple(_address("REDIS_URL", item) for item in names),
        master=unquote(master),
        db=_db("REDIS_URL", db or "0"),
        username=username,
        password=password,
        **common,
    )


def _split(url: str) -> tuple[str | None, str | None, str, str, str]:
    """User, password, hosts, path and query of ``url``. The credentials end at the last ``@``,
    so that a password with ``/``, ``?`` or ``@`` in it never spills into a part an error
    message quotes."""
    credentials, _, rest = url.split("://", 1)[1].rpartition("@")
    rest, _, query = rest.partition("?")
    hosts, _, path = rest.partition("/")
    username, has_password, password = credentials.partition(":")
    return (
        unquote(username) or None,
        unquote(password) if has_password and password else None,
        hosts,
        path,
        query,
    )


def _address(name: str, item: str) -> tuple[str, int]:
    """``host:port``, ``host`` (port 26379), ``[v6 address]:port`` or ``[v6 address]``."""
    if item.startswith("["):
        host, bracket, after = item[1:].partition("]")
        valid, port = bool(bracket) and (not after or after.startswith(":")), after[1:]
    else:
        host, _, port = item.partition(":")
        valid = ":" not in port
    if not valid or not host or any(character in host for character in "/@[] "):
        raise ImproperlyConfigured(f"{name}: {item!r} is not a host:port")
    if not port:
        return host, SENTINEL_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ImproperlyConfigured(f"{name}: {item!r} is not a host:port (port 1 to 65535)")
    return host, int(port)


def _db(name: str, value: str) -> int:
    if not value.isdigit():
        raise ImproperlyConfigured(f"{name}: the database (after the last /) must be a number")
    return int(value)


def failover_retry(seconds: float, retry_class: type[Any] = Retry) -> Any:
    """Retries of a command whose connection to the primary failed (reset, refused, no primary
    known yet, READONLY from a demoted one), each reconnecting through the sentinels, for about
    ``seconds`` of backoff in all. A timeout is not retried: it already waited its socket
    timeout, and a hung server is an outage, not a failover."""
    backoff = ExponentialBackoff(cap=_BACKOFF_CAP_SECONDS, base=_BACKOFF_BASE_SECONDS)
    retries, waited = 0, 0.0
    while waited < seconds:
        retries += 1
        waited += backoff.compute(retries)
    return retry_class(backoff, retries, supported_errors=(RedisConnectionError,))


def probe_config(config: dict[str, Any], seconds: float) -> dict[str, Any]:
    """A copy of an ``RQ_QUEUES`` entry whose client waits at most ``seconds`` for anything and
    never retries: a health probe's."""
    probe = dict(config)
    if "SENTINELS" not in probe:
        parts = urlparse(str(probe["URL"]))
        options = dict(parse_qsl(parts.query))
        options.update(socket_timeout=f"{seconds:g}", socket_connect_timeout=f"{seconds:g}")
        probe["URL"] = parts._replace(query=urlencode(options)).geturl()
        return probe
    probe["SOCKET_TIMEOUT"] = seconds
    probe["CONNECTION_KWARGS"] = {
        **probe.get("CONNECTION_KWARGS", {}),
        "socket_connect_timeout": seconds,
        "retry": Retry(NoBackoff(), 0),
    }
    probe["SENTINEL_KWARGS"] = {
        **probe.get("SENTINEL_KWARGS", {}),
        "socket_timeout": seconds,
        "socket_connect_timeout": seconds,
    }
    return probe


def with_socket_timeouts(url: str, socket_timeout: float, connect_timeout: float) -> str:
    """``url`` with redis-py's socket timeouts as query options (django-rq passes nothing else
    for a URL), unless the URL names its own."""
    parts = urlparse(url)
    options = dict(parse_qsl(parts.query))
    options.setdefault("socket_timeout", f"{socket_timeout:g}")
    options.setdefault("socket_connect_timeout", f"{connect_timeout:g}")
    return parts._replace(query=urlencode(options)).geturl()
