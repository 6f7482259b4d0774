"""Loaded before Django (``-p tests.parallel`` in pyproject.toml): under pytest-xdist each worker
gets a Redis index of its own, counting down from ``REDIS_URL``'s (gw0 keeps it, gw1 takes the
one below...), so that one worker's FLUSHDB never empties another's queues. The database needs
nothing here: pytest-django gives each worker its own test database (``test_<name>_gw<N>``).

Processes the tests start inherit the worker's ``REDIS_URL`` from the environment."""

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw"):
    _url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    _base, _, _index = _url.rpartition("/")
    _own = int(_index or 0) - int(_worker[2:])
    if _own < 6:  # 5 is the chaos drill's (Makefile), 0 the default one of `make run`
        raise RuntimeError(
            f"too many test workers for {_url}: worker {_worker} would use index {_own}"
        )
    os.environ["REDIS_URL"] = f"{_base}/{_own}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list) -> None:  # type: ignore[type-arg]
    """Tests marked ``slow`` (a minute or more of real time: a default-settings recovery, the
    reduced drill, the cluster drill's freeze) go first, so that their waits overlap the rest of
    the suite instead of ending it on one worker. Every worker sorts the same way (xdist needs
    one order). After pytest-django's own sort (transactional tests last): most slow tests are
    transactional, and their flush empties what data migrations seeded (the prices), which
    tests/conftest.py ``seeded_prices`` puts back for the tests after them."""
    items.sort(key=_order)


def _order(item: pytest.Item) -> int:
    """Slow tests first (above), tests marked ``quiet`` last: each of those has the machine to
    itself (below), and at the end of the run no long test is left for it to wait behind."""
    if item.get_closest_marker("slow") is not None:
        return 0
    return 2 if item.get_closest_marker("quiet") is not None else 1


_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")


@contextmanager
def _machine_share(alone: bool) -> Iterator[None]:
    """A test of this run holds the machine shared; a ``quiet`` one holds it alone, so that
    the other workers' tests do not add their CPU load to the timing it measures (the spacing of
    calls as a provider counts their arrivals: on 2 cores, 5 workers' tests stretch the send
    jitter past what the assertion allows). The gate makes a quiet test first in line: while it
    waits for the running tests to end, no new test starts."""
    folder = Path(tempfile.gettempdir()) / f"llmops-tests-{_RUN}"
    folder.mkdir(exist_ok=True)
    with (folder / "gate").open("a") as gate, (folder / "machine").open("a") as machine:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield  # (closing the files releases what is held)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _RUN:  # one process: nothing else runs beside a test
        yield
        return
    with _machine_share(item.get_closest_marker("quiet") is not None):
        yield
