"""The ops dashboard's deadline panel: per feature, the jobs whose deadline passed in the window
and how many completed by it."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from jobs.models import LlmJob
from ops.dashboard import dashboard_data

NOW = datetime(2026, 3, 10, 12, 30, 20, tzinfo=UTC)

pytestmark = [pytest.mark.django_db]


def job(owner: Any, *, feature: str, deadline: datetime, completed_at: datetime | None) -> None:
    LlmJob.objects.create(
        user=owner,
        feature=feature,
        model="claude-haiku-4-5",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=50,
        request_fingerprint="fp",
        deadline=deadline,
        status=LlmJob.Status.COMPLETED if completed_at else LlmJob.Status.FAILED,
        completed_at=completed_at,
    )


def test_the_dashboard_shows_deadline_attainment_per_feature_in_its_window() -> None:
    owner = get_user_model().objects.create_user("owen", password="pw")
    passed = NOW - timedelta(hours=1)
    job(owner, feature="alpha", deadline=passed, completed_at=passed - timedelta(seconds=5))
    job(owner, feature="alpha", deadline=passed, completed_at=passed + timedelta(seconds=5))
    job(owner, feature="beta", deadline=passed, completed_at=None)
    job(owner, feature="beta", deadline=NOW - timedelta(hours=30), completed_at=None)  # outside
    job(owner, feature="beta", deadline=NOW + timedelta(minutes=5), completed_at=None)  # to come

    data = dashboard_data(hours=6, now=NOW)
    assert data["deadlines"] == [
        {"feature": "alpha", "with_deadline": 2, "met": 1, "ratio": 0.5},
        {"feature": "beta", "with_deadline": 1, "met": 0, "ratio": 0.0},
    ]


def test_the_dashboard_data_carries_the_deadline_panel(client: Client) -> None:
    staff = get_user_model().objects.create_user("sam", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get("/admin/ops/dashboard/data.json").json()["deadlines"] == []
    assert b'id="panel-deadlines"' in client.get("/admin/ops/dashboard/").content
