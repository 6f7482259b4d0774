"""The MySQL/MariaDB backend (llmops/db_backends/mysql): a new thread's first query opens one
connection, not two. Django reads the server's facts once per connection object, on a temporary
connection of its own, and the threaded workers make a connection object per job thread; the
control shows what Django's backend (through django-prometheus) does."""

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections
from django.db.backends.signals import connection_created
from django.db.utils import ConnectionHandler

from jobs.models import LlmJob
from llmops.db_backends.mysql import base as backend

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 5


def _opened_per_thread(handler: ConnectionHandler) -> list[int]:
    """Each of THREADS threads asks whether the server is MariaDB (what a UUID lookup asks
    first) and runs one query; how many connections each opened."""
    counts: list[int] = []

    def one() -> None:
        conn = handler["default"]
        opened: list[object] = []

        def count(sender: object, connection: object, **kwargs: object) -> None:
            if connection is conn:
                opened.append(connection)

        connection_created.connect(count, weak=False)
        try:
            assert conn.mysql_is_mariadb in (True, False)
            with conn.cursor() as cursor:
                cursor.execute("SELECT 1")
        finally:
            conn.close()
            connection_created.disconnect(count)
        counts.append(len(opened))

    for _ in range(THREADS):
        thread = threading.Thread(target=one)
        thread.start()
        thread.join()
    return counts


def _handler(engine: str) -> ConnectionHandler:
    return ConnectionHandler({"default": {**connection.settings_dict, "ENGINE": engine}})


@pytest.fixture
def mysql() -> None:
    if connection.vendor != "mysql":
        pytest.skip("the MySQL/MariaDB backend's test (DATABASE_URL is not mysql://)")


def test_a_new_thread_opens_one_connection_and_the_facts_are_read_once(mysql: None) -> None:
    _opened_per_thread(_handler("llmops.db_backends.mysql"))  # this server's facts, once
    reads = backend.server_data_reads
    assert _opened_per_thread(_handler("llmops.db_backends.mysql")) == [1] * THREADS
    assert backend.server_data_reads == reads


def test_django_s_own_backend_opens_two(mysql: None) -> None:
    """The control: the check above can fail."""
    assert _opened_per_thread(_handler("django_prometheus.db.backends.mysql")) == [2] * THREADS


def test_the_orm_works_through_it_from_new_threads(mysql: None) -> None:
    assert connection.settings_dict["ENGINE"] == "llmops.db_backends.mysql"

    def lookup(_: int) -> object:
        try:
            return LlmJob.objects.filter(id=uuid.uuid4()).first()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="backend-test") as pool:
        assert list(pool.map(lookup, range(3))) == [None, None, None]
