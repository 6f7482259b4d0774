"""Reading settings from the environment: environs' parsers, dj-database-url for DATABASE_URL.

``env`` keeps the formats docs/operations.md documents (an empty number or JSON value means the
default; a switch is only True/true/1/yes or False/false/0/no/empty) and stops start-up with
``ImproperlyConfigured`` naming the variable. A value that reads but is wrong for its app (an
alert route, a rate-limit table) is a system check of that app instead (llmops/checks.py).
"""

import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import dj_database_url
import environs
import marshmallow
from django.core.exceptions import ImproperlyConfigured

from llmops.redis_config import RedisServer, redis_server

__all__ = ["DEVELOPMENT_SECRET_KEY", "Env", "database_url", "env"]

DEVELOPMENT_SECRET_KEY = "dev-only-insecure-key-change-me-in-production"

_ENGINES = {
    "sqlite": "django_prometheus.db.backends.sqlite3",
    "mysql": "llmops.db_backends.mysql",
    "mariadb": "llmops.db_backends.mysql",
    "postgres": "django_prometheus.db.backends.postgresql",
    "postgresql": "django_prometheus.db.backends.postgresql",
}
_DEFAULT_PORTS = {"mysql": 3306, "postgresql": 5432}


def database_url(
    config: dict[str, Any], *, host: str | None = None, port: int | str | None = None
) -> str:
    """A DATABASE_URL for another process on the same database as ``config`` (a ``DATABASES``
    entry; under pytest the test database, whose name only the connection knows): the
    inverse of ``Env.database``. ``host``/``port``: reach it another way (a test's forwarder).
    SQLite (a file, or the tests' in-memory database) gives ``sqlite:///NAME``."""
    vendor = config["ENGINE"].rsplit(".", 1)[-1]
    if vendor == "sqlite3":
        return f"sqlite:///{config['NAME']}"
    scheme = "postgres" if vendor == "postgresql" else "mysql"
    auth = quote(config["USER"] or "", safe="")
    if config.get("PASSWORD"):
        auth += ":" + quote(config["PASSWORD"], safe="")
    host = host or config["HOST"] or "127.0.0.1"
    port = port or config["PORT"] or _DEFAULT_PORTS[vendor]
    return f"{scheme}://{auth}@{host}:{port}/{config['NAME']}"


class _Switch(marshmallow.fields.Boolean):
    truthy = {"True", "true", "1", "yes"}
    falsy = {"False", "false", "0", "no", ""}


class _Number(marshmallow.fields.Float):
    def __init__(self, **kwargs: Any) -> None:
        # float() took nan and inf before the library read these values: so does this.
        super().__init__(allow_nan=True, **kwargs)


class Env(environs.Env):
    """environs' reader (eager: the first bad value raises; no ``.env`` file is read, the
    process manager sets the environment) with this project's formats and messages."""

    def __init__(self) -> None:
        super().__init__()
        self.add_parser_from_field("_switch", _Switch)
        self.add_parser_from_field("_number", _Number)
        self.read_names: set[str] = set()
        """Every variable the settings read: the project's own, which no provider row may name
        as its key's variable (providers/key_envs.py)."""

    def _get_from_environ(self, key: str, default: Any, *, proxied: bool = False) -> Any:
        self.read_names.add(key)
        return super()._get_from_environ(key, default, proxied=proxied)

    def switch(self, name: str, default: bool) -> bool:
        try:
            return bool(self._switch(name, default))
        except environs.EnvError as exc:
            raise ImproperlyConfigured(
                f"{name} must be True or False, not {os.environ[name]!r}"
            ) from exc

    def integer(self, name: str, default: int, *, minimum: int | None = None) -> int:
        return int(self._bounded(self.int, "an integer", name, default, minimum))

    def number(self, name: str, default: float, *, minimum: float | None = None) -> float:
        return float(self._bounded(self._number, "a number", name, default, minimum))

    def json_value(self, name: str, default: Any) -> Any:
        """Parsed JSON, checked by its app; errors never echo the value (it may hold secrets)."""
        self.read_names.add(name)
        if not os.environ.get(name, "").strip():
            return default
        try:
            return self.json(name)
        except environs.EnvError as exc:
            detail = exc.__cause__.__cause__ if exc.__cause__ else None  # json's line and column
            raise ImproperlyConfigured(f"{name} must be JSON: {detail or exc}") from exc

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.str(name, default)
        if value not in choices:
            raise ImproperlyConfigured(f"{name} must be {' or '.join(choices)}, not {value!r}")
        return value

    def names(self, name: str, default: str = "") -> list[str]:
        """A comma-separated list, each item stripped, empty ones left out."""
        return [item.strip() for item in self.list(name, default.split(","), str) if item.strip()]

    def database(self, name: str, default: str, *, base_dir: Path) -> dict[str, Any]:
        """sqlite:///path (empty: db.sqlite3), mysql://user:password@host:port/name (MariaDB or
        MySQL: utf8mb4, READ COMMITTED) or postgres://user:password@host:port/name (PostgreSQL,
        psycopg 3: READ COMMITTED, its default), parsed by dj-database-url; query options
        (?ssl-ca=, ?sslmode=) win. docs/databases.md says which to run in production."""
        url = self.str(name, default)
        scheme = urlsplit(url).scheme
        if scheme not in _ENGINES:
            raise ImproperlyConfigured(f"{name} scheme {scheme!r} is not supported")
        sqlite = scheme == "sqlite"
        vendor = "sqlite" if sqlite else _ENGINES[scheme].rsplit(".", 1)[-1]
        try:
            parsed = dj_database_url.parse(
                url if sqlite else vendor + url[len(scheme) :],
                engine=_ENGINES[scheme],
                conn_max_age=0 if sqlite else 60,
                conn_health_checks=not sqlite,
                test_options={"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
                if vendor == "mysql"
                else None,
            )
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {exc}") from exc
        config: dict[str, Any] = dict(parsed)
        if sqlite:
            # Web and workers write concurrently: wait for the lock instead of failing at once.
            options: dict[str, Any] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
            if not urlsplit(url).path[1:]:
                config["NAME"] = base_dir / "db.sqlite3"
        else:
            # A dead host fails a connect within 10 s, not the kernel's two minutes.
            options = {"connect_timeout": 10}
            if vendor == "mysql":
                options.update(charset="utf8mb4", isolation_level="read committed")
            if not config["NAME"]:
                raise ImproperlyConfigured(
                    f"{name} must name a database: {scheme}://user@host/name"
                )
            config["USER"] = config["USER"] or ("root" if vendor == "mysql" else "postgres")
            config["HOST"] = config["HOST"] or "127.0.0.1"
            config["PORT"] = str(config["PORT"] or _DEFAULT_PORTS[vendor])
        config["OPTIONS"] = {**options, **config.get("OPTIONS", {})}
        return config

    def redis(self, name: str, default: str) -> RedisServer:
        """``name`` (REDIS_URL), or the primary that ``REDIS_SENTINELS`` (host:port,...) watch
        as ``REDIS_SENTINEL_MASTER``, or a redis+sentinel:// URL (llmops/redis_config.py)."""
        return redis_server(
            self.str(name, default),
            sentinels=self.names("REDIS_SENTINELS"),
            master=self.str("REDIS_SENTINEL_MASTER", ""),
            sentinel_password=self.str("REDIS_SENTINEL_PASSWORD", ""),
            failover_seconds=self.number("REDIS_SENTINEL_RETRY_SECONDS", 10.0, minimum=0.0),
        )

    def secret_key(self, name: str, *, debug: bool, secure: bool) -> str:
        value = self.str(name, "")
        if not value:
            if secure:
                raise ImproperlyConfigured(f"{name} must be set when DJANGO_SECURE is on")
            # DEBUG off: a random key for this process only; nothing can be forged with a key
            # printed in the source, sessions simply do not outlive the process.
            return DEVELOPMENT_SECRET_KEY if debug else secrets.token_urlsafe(50)
        # Django's own bar for a production key (check --deploy, security.W009).
        if secure and (len(value) < 50 or len(set(value)) < 5 or value == DEVELOPMENT_SECRET_KEY):
            raise ImproperlyConfigured(
                f"{name} must be at least 50 random characters when DJANGO_SECURE is on"
            )
        return value

    def allowed_hosts(self, name: str, default: str, secure: bool) -> list[str]:
        hosts = self.names(name, default)
        # Answering any Host header lets a forged one into absolute URLs (password-reset links).
        if secure and (not hosts or "*" in hosts):
            raise ImproperlyConfigured(
                f"{name} must name the site's hosts when DJANGO_SECURE is on"
            )
        return hosts

    def proxy_ssl_header(self, name: str) -> tuple[str, str] | None:
        """HTTP_X_FORWARDED_PROTO (value https) or HTTP_X_FORWARDED_SSL,on: the header a
        TLS-terminating proxy sets, and strips from what clients send."""
        raw = self.str(name, "")
        if not raw:
            return None
        header, _, value = raw.partition(",")
        header, value = header.strip().upper(), value.strip() or "https"
        if not header.startswith("HTTP_") or not header.replace("_", "").isalnum():
            raise ImproperlyConfigured(f"{name} must look like HTTP_X_FORWARDED_PROTO, not {raw!r}")
        return (header, value)

    def _bounded(self, parse: Any, what: str, name: str, default: Any, minimum: Any) -> Any:
        self.read_names.add(name)
        raw = os.environ.get(name, "")
        if not raw.strip():
            return default
        try:
            value = parse(name)
        except environs.EnvError as exc:
            raise ImproperlyConfigured(f"{name} must be {what}, not {raw!r}") from exc
        if minimum is not None and value < minimum:
            raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
        return value


env = Env()
