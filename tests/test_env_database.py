"""DATABASE_URL for each database llmops runs on (llmops/env.py), and the URL the tests and the
drill hand their child processes (``database_url``, its inverse). Pure: no database."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from llmops.env import Env, database_url

BASE = Path("/srv/llmops")


def parse(url: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("DATABASE_URL", url)
    return Env().database("DATABASE_URL", "sqlite:///", base_dir=BASE)


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_it_reads_a_postgresql_url_with_psycopg_and_the_defaults(scheme, monkeypatch):
    config = parse(f"{scheme}://llmops:s3cret@db.internal/llmops", monkeypatch)
    assert config["ENGINE"] == "django_prometheus.db.backends.postgresql"
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("db.internal", "5432", "llmops")
    assert (config["USER"], config["PASSWORD"]) == ("llmops", "s3cret")
    assert config["OPTIONS"] == {"connect_timeout": 10}  # READ COMMITTED is PostgreSQL's own
    assert config["CONN_MAX_AGE"] == 60 and config["CONN_HEALTH_CHECKS"]
    assert "CHARSET" not in config.get("TEST", {})  # MariaDB's utf8mb4 is not PostgreSQL's


def test_a_postgresql_url_without_a_user_or_host_takes_the_local_server(monkeypatch):
    config = parse("postgres:///llmops", monkeypatch)
    assert (config["USER"], config["HOST"], config["PORT"]) == ("postgres", "127.0.0.1", "5432")


def test_options_in_the_query_go_to_the_driver_and_win(monkeypatch):
    config = parse(
        "postgres://u@h/n?sslmode=require&connect_timeout=3&options=-c%20statement_timeout%3D30s",
        monkeypatch,
    )
    assert config["OPTIONS"] == {
        "connect_timeout": 3,
        "sslmode": "require",
        "options": "-c statement_timeout=30s",
    }


def test_a_mariadb_url_keeps_utf8mb4_and_read_committed(monkeypatch):
    config = parse("mysql://root@127.0.0.1/llmops", monkeypatch)
    assert config["ENGINE"] == "llmops.db_backends.mysql"
    assert config["OPTIONS"] == {
        "connect_timeout": 10,
        "charset": "utf8mb4",
        "isolation_level": "read committed",
    }
    assert (config["USER"], config["PORT"]) == ("root", "3306")
    assert config["TEST"]["CHARSET"] == "utf8mb4"


@pytest.mark.parametrize("scheme", ["postgres", "mysql"])
def test_a_url_without_a_database_name_is_refused_with_its_scheme(scheme, monkeypatch):
    with pytest.raises(ImproperlyConfigured, match=f"{scheme}://user@host/name"):
        parse(f"{scheme}://u@h:1234/", monkeypatch)


def test_an_unknown_scheme_is_refused(monkeypatch):
    with pytest.raises(ImproperlyConfigured, match="scheme 'oracle' is not supported"):
        parse("oracle://u@h/n", monkeypatch)


@pytest.mark.parametrize(
    "url",
    [
        "postgres://llmops:p%40ss%3Aw%2Fd@db.internal:6543/llmops",
        "mysql://root@127.0.0.1:3307/test_test_gw1",
        "postgres://postgres@127.0.0.1:5432/test_hd",
    ],
)
def test_database_url_gives_back_a_url_of_the_same_database(url, monkeypatch):
    config = parse(url, monkeypatch)
    again = parse(database_url(config), monkeypatch)
    for key in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT"):
        assert again[key] == config[key], key


def test_database_url_reaches_the_database_another_way_when_asked(monkeypatch):
    config = parse("postgres://llmops@db.internal/llmops", monkeypatch)
    assert database_url(config, host="127.0.0.1", port=40001) == (
        "postgres://llmops@127.0.0.1:40001/llmops"
    )
