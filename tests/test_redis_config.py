"""Where Redis is (llmops/redis_config.py): one server, or the primary Redis Sentinel names, read
from REDIS_URL, REDIS_SENTINELS and REDIS_SENTINEL_MASTER; the options of every client built
from it; and the clear refusal of a configuration that does not agree, without its secrets."""

import json
import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from redis.asyncio.retry import Retry as AsyncRetry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from llmops.redis_config import RedisServer, failover_retry, probe_config, redis_server
from tests.test_deploy_settings import run_python, start_up_error

SECRET = "s3cr/t@p?ss"


def test_a_plain_url_is_one_server_as_before() -> None:
    server = redis_server("redis://:pw@10.0.0.5:6380/3")
    assert not server.through_sentinel
    assert server.rq_connection(10, 5) == {
        "URL": "redis://:pw@10.0.0.5:6380/3?socket_timeout=10&socket_connect_timeout=5"
    }
    host = server.channel_layer_host(15, connect_timeout=5)
    assert host["address"] == "redis://:pw@10.0.0.5:6380/3"
    assert host["retry_on_error"] == [RedisConnectionError]


def test_the_sentinel_variables_name_the_primary_and_the_url_gives_its_database() -> None:
    server = redis_server(
        "redis://:pw@ignored:6379/4",
        sentinels=["10.0.0.1:26379", " 10.0.0.2:26380 ", "sentinel-3", "[::1]:26381"],
        master="mymaster",
        sentinel_password="sentinel-pw",
    )
    assert server.sentinels == (
        ("10.0.0.1", 26379),
        ("10.0.0.2", 26380),
        ("sentinel-3", 26379),
        ("::1", 26381),
    )
    assert (server.master, server.db, server.password) == ("mymaster", 4, "pw")
    assert server.sentinel_password == "sentinel-pw"


def test_the_redis_sentinel_url_says_it_all_in_one_value() -> None:
    server = redis_server(f"redis+sentinel://app:{SECRET}@h1:26379,h2,h3:5000/mymaster/2")
    assert server.sentinels == (("h1", 26379), ("h2", 26379), ("h3", 5000))
    assert (server.master, server.db, server.username, server.password) == (
        "mymaster",
        2,
        "app",
        SECRET,
    )
    assert redis_server("redis+sentinel://h1/mymaster").db == 0
    assert redis_server("REDIS+SENTINEL://h1/mymaster/").master == "mymaster"


def test_every_client_through_sentinel_keeps_the_timeouts_and_retries_a_failover() -> None:
    server = redis_server("redis+sentinel://:pw@h1,h2/mymaster/1", failover_seconds=10)
    rq = server.rq_connection(10, 5)
    assert rq["SENTINELS"] == [("h1", 26379), ("h2", 26379)]
    assert (rq["MASTER_NAME"], rq["DB"], rq["PASSWORD"], rq["SOCKET_TIMEOUT"]) == (
        "mymaster",
        1,
        "pw",
        10,
    )
    assert rq["CONNECTION_KWARGS"]["socket_connect_timeout"] == 5
    assert isinstance(rq["CONNECTION_KWARGS"]["retry"], Retry)
    assert rq["SENTINEL_KWARGS"] == {"socket_timeout": 5, "socket_connect_timeout": 5}

    host = server.channel_layer_host(15, connect_timeout=5)
    assert (host["master_name"], host["sentinels"], host["db"]) == ("mymaster", rq["SENTINELS"], 1)
    assert (host["socket_timeout"], host["socket_connect_timeout"]) == (15, 5)
    assert isinstance(host["retry"], AsyncRetry)  # channels-redis's connections are asyncio's


def test_a_failover_is_retried_for_about_the_seconds_given_and_a_timeout_is_not() -> None:
    retry = failover_retry(10)
    waits = [retry._backoff.compute(n) for n in range(1, retry.get_retries() + 1)]
    assert 10 <= sum(waits) < 11 and max(waits) == 1.0 and waits[0] == 0.1
    assert retry._supported_errors == (RedisConnectionError,)
    assert failover_retry(0).get_retries() == 0


def test_a_probe_waits_a_second_at_most_and_never_retries() -> None:
    plain = probe_config({"URL": "redis://h:6379/2?socket_timeout=10", "DB": None}, 1.0)
    assert plain["URL"] == "redis://h:6379/2?socket_timeout=1&socket_connect_timeout=1"
    sentinel = probe_config(redis_server("redis+sentinel://h1/m").rq_connection(10, 5), 1.0)
    assert sentinel["SOCKET_TIMEOUT"] == 1.0
    assert sentinel["CONNECTION_KWARGS"]["socket_connect_timeout"] == 1.0
    assert sentinel["CONNECTION_KWARGS"]["retry"].get_retries() == 0
    assert sentinel["SENTINEL_KWARGS"] == {"socket_timeout": 1.0, "socket_connect_timeout": 1.0}


@pytest.mark.parametrize(
    ("url", "sentinels", "master", "message"),
    [
        ("redis://h/0", ["h1:26379"], "", "REDIS_SENTINEL_MASTER is not"),
        ("redis://h/0", [], "mymaster", "REDIS_SENTINELS is not"),
        ("redis://h/0", ["h1:port"], "m", "REDIS_SENTINELS: 'h1:port' is not a host:port"),
        ("redis://h/0", ["h1:70000"], "m", "port 1 to 65535"),
        ("redis://h/0", ["h1:1:2"], "m", "'h1:1:2' is not a host:port"),
        ("redis://h/0", ["[::1"], "m", "'[::1' is not a host:port"),
        ("redis://h/db", ["h1"], "m", "the database (after the last /) must be a number"),
        ("rediss://h/0", ["h1"], "m", "must be a redis:// URL with REDIS_SENTINELS"),
        ("redis://h/0?socket_timeout=3", ["h1"], "m", "no query options"),
        ("redis+sentinel://h1/m", ["h1"], "m", "leave REDIS_SENTINELS and REDIS_SENTINEL_MASTER"),
        ("redis+sentinel:///m/0", [], "", "must list its sentinels"),
        ("redis+sentinel://h1", [], "", "must name the primary"),
        ("redis+sentinel://h1/m/x", [], "", "must be a number"),
        ("redis+sentinel://h1/m?x=1", [], "", "no query options"),
        ("http://h/0", [], "", "REDIS_URL must be redis://"),
        ("localhost:6379", [], "", "not a bare URL"),
    ],
)
def test_a_configuration_that_does_not_agree_is_refused_clearly(
    url: str, sentinels: list[str], master: str, message: str
) -> None:
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        redis_server(url, sentinels=sentinels, master=master)


@pytest.mark.parametrize(
    "url",
    [
        f"redis+sentinel://:{SECRET}@h1:bad/m/0",
        f"redis+sentinel://user:{SECRET}@h1/m/zero",
        f"redis+sentinel://:{SECRET}@h1/m/0?x=1",
        f"redis+sentinel://:{SECRET}@/m/0",
        f"redis://:{SECRET}@h/0?socket_timeout=1",
        f"redis://:{SECRET}@h/zero",
    ],
)
def test_no_refusal_quotes_a_password(url: str) -> None:
    sentinels, master = ([], "") if url.startswith("redis+") else (["h1"], "m")
    with pytest.raises(ImproperlyConfigured) as refused:
        redis_server(url, sentinels=sentinels, master=master, sentinel_password=SECRET)
    for part in ["s3cr", "p?ss", "t@p"]:
        assert part not in str(refused.value)


def test_no_representation_shows_a_password() -> None:
    server = redis_server(f"redis+sentinel://:{SECRET}@h1/m", sentinel_password=SECRET)
    assert SECRET not in repr(server) and "s3cr" not in repr(server)
    assert isinstance(server, RedisServer)


def test_the_settings_read_the_sentinel_variables_and_stop_start_up_on_a_bad_one() -> None:
    environment = {"REDIS_SENTINELS": "10.0.0.1:26379,10.0.0.2:26379"}
    error = start_up_error(environment)
    assert "ImproperlyConfigured" in error and "REDIS_SENTINEL_MASTER is not" in error

    environment["REDIS_SENTINEL_MASTER"] = "mymaster"
    environment["REDIS_URL"] = f"redis://:{SECRET}@localhost/3"
    code = (
        "import json, llmops.settings as s; q = s.RQ_QUEUES['llm']; "
        "h = s.CHANNEL_LAYERS['default']['CONFIG']['hosts'][0]; "
        "print(json.dumps([q['SENTINELS'], q['MASTER_NAME'], q['DB'], h['master_name']]))"
    )
    result = run_python(["-c", code], environment)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        [["10.0.0.1", 26379], ["10.0.0.2", 26379]],
        "mymaster",
        3,
        "mymaster",
    ]
