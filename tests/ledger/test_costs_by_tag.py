"""GET /api/v1/costs/?group_by=tag: a ledger row counts in each tag of its job, the totals count
it once; and the report's deadline attainment per feature over its period."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import LlmJob
from tests.conftest import submit
from tests.ledger.cost_data import entry

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]

URL = "/api/v1/costs/"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def get(client: APIClient, **params: Any) -> dict[str, Any]:
    response = client.get(URL, params)
    assert response.status_code == 200, response.content
    return dict(response.json())


def test_group_by_tag_sums_each_tags_ledger_rows(alice_client: APIClient) -> None:
    now = timezone.now()
    both = submit(alice_client, tags=["nightly", "eu"])
    eu = submit(alice_client, tags=["eu"])
    untagged = submit(alice_client)
    entry(both, now, attempt=1, cost="0.010000", input_tokens=100, output_tokens=10)
    entry(both, now, attempt=2, cost="0.020000", input_tokens=200, output_tokens=20)
    entry(eu, now, attempt=1, cost="0.004000", input_tokens=40, output_tokens=4)
    entry(untagged, now, attempt=1, cost="0.001000", input_tokens=10, output_tokens=1)

    body = get(alice_client, group_by="tag", since="1h")
    rows = {row["key"]: row for row in body["rows"]}
    assert set(rows) == {"nightly", "eu", None}
    assert (rows["eu"]["cost_usd"], rows["eu"]["jobs"], rows["eu"]["attempts"]) == (
        "0.034000",
        2,
        3,
    )
    assert rows["eu"]["tokens"]["input"] == 340
    assert (rows["nightly"]["cost_usd"], rows["nightly"]["jobs"]) == ("0.030000", 1)
    assert (rows[None]["cost_usd"], rows[None]["jobs"]) == ("0.001000", 1)
    # The totals count every row once, though a job with two tags is in two rows.
    totals = body["totals"]
    assert (totals["cost_usd"], totals["jobs"], totals["attempts"]) == ("0.035000", 3, 4)
    assert totals["tokens"]["input"] == 350
    assert [row["key"] for row in body["rows"]] == ["eu", "nightly", None]  # by cost


def _with_deadline(job: LlmJob, *, deadline: datetime, completed_at: datetime | None) -> None:
    LlmJob.objects.filter(id=job.id).update(
        deadline=deadline,
        status=LlmJob.Status.COMPLETED if completed_at else LlmJob.Status.FAILED,
        completed_at=completed_at,
    )


def test_the_report_shows_deadline_attainment_per_feature(alice_client: APIClient) -> None:
    now = timezone.now()
    passed = now - timedelta(minutes=5)
    jobs = [submit(alice_client, feature="summarize", deadline_seconds=60) for _ in range(4)]
    _with_deadline(jobs[0], deadline=passed, completed_at=passed - timedelta(seconds=1))
    _with_deadline(jobs[1], deadline=passed, completed_at=passed - timedelta(seconds=30))
    _with_deadline(jobs[2], deadline=passed, completed_at=passed + timedelta(seconds=1))  # late
    _with_deadline(jobs[3], deadline=passed, completed_at=None)  # failed
    other = submit(alice_client, feature="classify", deadline_seconds=60)
    _with_deadline(other, deadline=passed, completed_at=passed)
    submit(alice_client, feature="classify", deadline_seconds=600)  # not passed: not counted
    submit(alice_client, feature="classify")  # no deadline
    old = submit(alice_client, feature="classify", deadline_seconds=60)
    _with_deadline(old, deadline=now - timedelta(days=3), completed_at=None)  # before the period

    body = get(alice_client, since="1d")
    assert body["deadline_attainment"] == [
        {"feature": "classify", "with_deadline": 1, "met": 1, "ratio": 1.0},
        {"feature": "summarize", "with_deadline": 4, "met": 2, "ratio": 0.5},
    ]
    narrowed = get(alice_client, since="1d", feature="summarize")["deadline_attainment"]
    assert [row["feature"] for row in narrowed] == ["summarize"]
    assert get(alice_client, since="7d")["deadline_attainment"][0]["with_deadline"] == 2
    assert get(alice_client, since=iso(now - timedelta(minutes=1)))["deadline_attainment"] == []


def test_another_users_deadlines_are_not_in_a_users_attainment(
    alice_client: APIClient, bob_client: APIClient
) -> None:
    passed = timezone.now() - timedelta(minutes=5)
    job = submit(bob_client, deadline_seconds=60)
    _with_deadline(job, deadline=passed, completed_at=None)
    assert get(alice_client, since="1d")["deadline_attainment"] == []
    assert get(bob_client, since="1d")["deadline_attainment"][0]["met"] == 0
    assert Decimal(get(bob_client, since="1d")["totals"]["cost_usd"]) == 0
