"""Reading settings from the environment: environs' parsers, dj-database-url for DATABASE_URL.

The readers keep the formats docs/operations.md documents (an empty number or JSON value means
the default; a switch is only True/true/1/yes or False/false/0/no/empty) and stop start-up with
``ImproperlyConfigured`` naming the variable. A value that reads but is wrong for its app (an
alert route, a rate-limit table) is a system check of that app instead (docs/architecture.md).
"""

import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse, urlsplit

import dj_database_url
import marshmallow
from django.core.exceptions import ImproperlyConfigured
from environs import Env, EnvError

__all__ = [
    "DEVELOPMENT_SECRET_KEY",
    "allowed_hosts",
    "database",
    "env",
    "integer",
    "json_value",
    "number",
    "proxy_ssl_header",
    "secret_key",
    "switch",
    "with_socket_timeouts",
]

env = Env()
"""Eager: the first value that does not parse raises (the readers below turn it into
ImproperlyConfigured). No ``.env`` file is read: the process manager sets the environment."""


class _Switch(marshmallow.fields.Boolean):
    truthy = {"True", "true", "1", "yes"}
    falsy = {"False", "false", "0", "no", ""}


class _Number(marshmallow.fields.Float):
    def __init__(self, **kwargs: Any) -> None:
        # float() accepted nan and inf before the library read these values: so does this.
        super().__init__(allow_nan=True, **kwargs)


env.add_parser_from_field("switch", _Switch)
env.add_parser_from_field("number", _Number)

DEVELOPMENT_SECRET_KEY = "dev-only-insecure-key-change-me-in-production"


def switch(name: str, default: bool) -> bool:
    try:
        return bool(env.switch(name, default))
    except EnvError as exc:
        raise ImproperlyConfigured(
            f"{name} must be True or False, not {os.environ[name]!r}"
        ) from exc


def _bounded(parser: str, what: str, name: str, default: Any, minimum: Any) -> Any:
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    try:
        value = getattr(env, parser)(name)
    except EnvError as exc:
        raise ImproperlyConfigured(f"{name} must be {what}, not {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def integer(name: str, default: int, *, minimum: int | None = None) -> int:
    return int(_bounded("int", "an integer", name, default, minimum))


def number(name: str, default: float, *, minimum: float | None = None) -> float:
    return float(_bounded("number", "a number", name, default, minimum))


def json_value(name: str, default: Any) -> Any:
    """Parsed JSON, checked by its app's system checks; errors never echo the value (secrets)."""
    if not os.environ.get(name, "").strip():
        return default
    try:
        return env.json(name)
    except EnvError as exc:
        detail = exc.__cause__.__cause__ if exc.__cause__ else None  # json's own: line, column
        raise ImproperlyConfigured(f"{name} must be JSON: {detail or exc}") from exc


_ENGINES = {
    "sqlite": "django_prometheus.db.backends.sqlite3",
    "mysql": "django_prometheus.db.backends.mysql",
    "mariadb": "django_prometheus.db.backends.mysql",
}


def database(name: str, default: str, *, base_dir: Path) -> dict[str, Any]:
    """sqlite:///path (empty: db.sqlite3) or mysql://user:password@host:port/name (MariaDB or
    MySQL: utf8mb4, READ COMMITTED), parsed by dj-database-url; query options (?ssl-ca=) win."""
    url = env.str(name, default)
    scheme = urlsplit(url).scheme
    if scheme not in _ENGINES:
        raise ImproperlyConfigured(f"{name} scheme {scheme!r} is not supported")
    sqlite = scheme == "sqlite"
    try:
        parsed = dj_database_url.parse(
            url if sqlite else "mysql" + url[len(scheme) :],
            engine=_ENGINES[scheme],
            conn_max_age=0 if sqlite else 60,
            conn_health_checks=not sqlite,
            test_options=None
            if sqlite
            else {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"},
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
        options = {"charset": "utf8mb4", "isolation_level": "read committed"}
        if not config["NAME"]:
            raise ImproperlyConfigured(f"{name} must name a database: mysql://user@host/name")
        config["USER"] = config["USER"] or "root"
        config["HOST"] = config["HOST"] or "127.0.0.1"
        config["PORT"] = str(config["PORT"] or 3306)
    config["OPTIONS"] = {**options, **config.get("OPTIONS", {})}
    return config


def secret_key(name: str, *, debug: bool, secure: bool) -> str:
    value = env.str(name, "")
    if not value:
        if secure:
            raise ImproperlyConfigured(f"{name} must be set when DJANGO_SECURE is on")
        # DEBUG off: a key for this process only; nothing can be forged with a key in the source.
        return DEVELOPMENT_SECRET_KEY if debug else secrets.token_urlsafe(50)
    # Django's own bar for a production key (check --deploy, security.W009).
    if secure and (len(value) < 50 or len(set(value)) < 5 or value == DEVELOPMENT_SECRET_KEY):
        raise ImproperlyConfigured(
            f"{name} must be at least 50 random characters when DJANGO_SECURE is on"
        )
    return value


def allowed_hosts(name: str, default: str, *, secure: bool) -> list[str]:
    hosts = [host.strip() for host in env.list(name, default.split(",")) if host.strip()]
    # Answering any Host header lets a forged one into absolute URLs (password-reset links).
    if secure and (not hosts or "*" in hosts):
        raise ImproperlyConfigured(f"{name} must name the site's hosts when DJANGO_SECURE is on")
    return hosts


def proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """HTTP_X_FORWARDED_PROTO (value https) or HTTP_X_FORWARDED_SSL,on: the header a
    TLS-terminating proxy sets, and strips from what clients send."""
    raw = env.str(name, "")
    if not raw:
        return None
    header, _, value = raw.partition(",")
    header, value = header.strip().upper(), value.strip() or "https"
    if not header.startswith("HTTP_") or not header.replace("_", "").isalnum():
        raise ImproperlyConfigured(f"{name} must look like HTTP_X_FORWARDED_PROTO, not {raw!r}")
    return (header, value)


def with_socket_timeouts(url: str, *, socket_timeout: float, connect_timeout: float) -> str:
    """``url`` with redis-py's socket timeouts as query options (django-rq passes nothing else
    for a URL), unless the URL names its own."""
    parts = urlparse(url)
    options = dict(parse_qsl(parts.query))
    options.setdefault("socket_timeout", f"{socket_timeout:g}")
    options.setdefault("socket_connect_timeout", f"{connect_timeout:g}")
    return parts._replace(query=urlencode(options)).geturl()
