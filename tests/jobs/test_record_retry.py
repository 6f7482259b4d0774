"""Recording an attempt rides out a short database outage (``jobs.runner._persist``, on tenacity):
the waits double from 0.5 s, no wait ends past the deadline, and the last database error is what
the caller sees. The real outage, through a network cut, is tests/jobs/test_record_hold.py."""

import time
from types import SimpleNamespace

import pytest
from django.db import OperationalError

import jobs.runner
from jobs.runner import _persist


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Waits recorded instead of slept, on a clock of the runner's that they move on."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(time, "sleep", sleep)  # tenacity sleeps through time.sleep
    monkeypatch.setattr(jobs.runner, "time", SimpleNamespace(monotonic=lambda: 1000.0 + sum(slept)))
    return slept


def test_it_retries_a_database_error_and_returns_what_the_write_returned(sleeps, caplog):
    calls: list[int] = []

    def write() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("server has gone away")
        return "recorded"

    assert _persist(write, until=1060.0) == "recorded"
    assert sleeps == [0.5, 1.0]
    assert caplog.text.count("recording an attempt failed on the database; retrying") == 2
    assert "server has gone away" in caplog.text  # the traceback of the error is logged


def test_the_waits_double_up_to_ten_seconds_and_stop_before_the_deadline(sleeps):
    errors: list[OperationalError] = []

    def write() -> None:
        errors.append(OperationalError(f"down {len(errors)}"))
        raise errors[-1]

    with pytest.raises(OperationalError) as raised:
        _persist(write, until=1040.0)
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert raised.value is errors[-1]  # the last error itself, not tenacity's RetryError


def test_another_error_is_not_retried(sleeps):
    def write() -> None:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        _persist(write, until=1060.0)
    assert sleeps == []
