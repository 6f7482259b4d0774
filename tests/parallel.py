"""Loaded before Django (``-p tests.parallel`` in pyproject.toml): under pytest-xdist each worker
gets a Redis index of its own, counting down from ``REDIS_URL``'s (gw0 keeps it, gw1 takes the
one below...), so that one worker's FLUSHDB never empties another's queues. The database needs
nothing here: pytest-django gives each worker its own test database (``test_<name>_gw<N>``).

Processes the tests start inherit the worker's ``REDIS_URL`` from the environment."""

import os

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
    reduced drill, a two-minute quiet socket) go first, so that their waits overlap the rest of
    the suite instead of ending it on one worker. Every worker sorts the same way (xdist needs
    one order). After pytest-django's own sort (transactional tests last): most slow tests are
    transactional, and their flush empties what data migrations seeded (the prices), which
    tests/conftest.py ``seeded_prices`` puts back for the tests after them."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
