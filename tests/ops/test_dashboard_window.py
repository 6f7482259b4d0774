"""The window the ops dashboard opens on, and how it names workers.

A fresh install's first jobs would be one spike at the right edge of six hours, so the page
opens on the smallest window that holds the oldest attempt or dead letter of the last 24 hours,
the last hour when there is none. Rows are seeded at chosen times (tests/ops/test_dashboard.py).
"""

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from ops.dashboard import initial_window_hours
from ops.dashboard.queues import worker_label
from tests.ops.test_dashboard import (
    DATA,
    NOW,
    PAGE,
    dead_letter,
    ledger_row,
    make_job,
    owner,  # noqa: F401  (fixture)
    staff_client,  # noqa: F401  (fixture)
)


def test_with_nothing_yet_it_opens_on_the_last_hour(db: None) -> None:
    assert initial_window_hours(NOW) == 1


@pytest.mark.parametrize(
    ("age", "hours"),
    [
        (timedelta(minutes=3), 1),
        (timedelta(minutes=59), 1),
        (timedelta(minutes=61), 6),
        (timedelta(hours=5, minutes=58), 6),
        (timedelta(hours=7), 24),
        (timedelta(hours=23, minutes=58), 24),
    ],
)
def test_it_opens_on_the_smallest_window_holding_the_oldest_attempt(
    owner: Any,  # noqa: F811
    age: timedelta,
    hours: int,
) -> None:
    job = make_job(owner)
    ledger_row(job, NOW - timedelta(minutes=1))
    ledger_row(job, NOW - age)
    assert initial_window_hours(NOW) == hours


def test_a_dead_letter_counts_as_activity_too(owner: Any) -> None:  # noqa: F811
    ledger_row(make_job(owner), NOW - timedelta(minutes=5))
    dead_letter(make_job(owner, status="failed"), NOW - timedelta(hours=3), "ERROR")
    assert initial_window_hours(NOW) == 6


def test_history_older_than_a_day_does_not_widen_it(owner: Any) -> None:  # noqa: F811
    job = make_job(owner)
    ledger_row(job, NOW - timedelta(days=3))
    assert initial_window_hours(NOW) == 1
    ledger_row(job, NOW - timedelta(minutes=20))
    assert initial_window_hours(NOW) == 1


def test_the_page_opens_on_that_window_unless_one_is_asked_for(
    staff_client: Client,  # noqa: F811
    owner: Any,  # noqa: F811
) -> None:
    ledger_row(make_job(owner), timezone.now() - timedelta(minutes=10))
    assert 'data-hours="1"' in staff_client.get(PAGE).content.decode()
    assert 'data-hours="24"' in staff_client.get(PAGE, {"hours": "24"}).content.decode()
    assert 'data-hours="1"' in staff_client.get(PAGE, {"hours": "3"}).content.decode()
    # The JSON without ?hours= keeps its fixed default, for scripts.
    assert staff_client.get(DATA).json()["window"]["hours"] == 6


def test_a_worker_is_named_by_host_and_pid_not_by_rqs_random_id() -> None:
    generated = "0f5c3a9e8b7d4c2a9e1f0b3c5d7e9a1b"
    assert worker_label(name=generated, hostname="web-1", pid=4242) == "web-1, pid 4242"
    assert worker_label(name="llm-1", hostname="web-1", pid=4242) == "llm-1 on web-1, pid 4242"
    assert worker_label(name=generated, hostname=None, pid=None) == "unknown host, pid ?"
