"""Fixtures of the ops tests."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jobs.test_takeover import Processes


@pytest.fixture
def spawned(tmp_path: Path) -> Iterator[Processes]:
    """Real processes (manage.py commands, uvicorn) with their output in files; all stopped at
    the end (tests/jobs/test_takeover.py's Processes)."""
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()
