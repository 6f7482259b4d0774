"""GET /api/v1/costs/: figures equal the sums of the ledger rows, each user sees only their own,
staff who may read the ledger see everyone, and bad filters answer 400 invalid_filter naming the
field. (Staff without ledger.view_costentry: tests/test_authorization.py.)"""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from ledger.selectors import cost_report
from tests.conftest import _client_for, make_user
from tests.ledger.cost_data import Ledger, build_ledger, expected_report

URL = "/api/v1/costs/"
GROUPS = ["feature", "model", "user", "day"]


@pytest.fixture
def ledger(alice: Any, bob: Any) -> Ledger:
    return build_ledger(alice, bob)


@pytest.fixture
def staff_client(db: None) -> APIClient:
    return _client_for(make_user("sam", "view_costentry", is_staff=True))


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def get(client: APIClient, **params: Any) -> dict[str, Any]:
    response = client.get(URL, params)
    assert response.status_code == 200, response.content
    return dict(response.json())


@pytest.mark.parametrize("group_by", GROUPS)
def test_it_reports_every_group_as_the_sums_of_the_ledger_rows(
    staff_client: APIClient, ledger: Ledger, group_by: str
) -> None:
    since, until = ledger.now - timedelta(days=60), ledger.now + timedelta(minutes=1)
    body = get(staff_client, group_by=group_by, since=iso(since), until=iso(until))

    want = expected_report(ledger, group_by=group_by, since=since, until=until)
    assert body["rows"] == want["rows"]
    assert body["totals"] == want["totals"]
    assert (body["group_by"], body["since"], body["until"]) == (group_by, iso(since), iso(until))


def test_it_counts_a_correction_in_cost_and_tokens_but_not_as_an_attempt(
    staff_client: APIClient, ledger: Ledger
) -> None:
    body = get(staff_client, group_by="feature", feature="classify")

    # The estimate 0.012 and its correction -0.0095: the job really cost 0.0025.
    assert body["rows"] == [
        {
            "key": "classify",
            "jobs": 1,
            "attempts": 1,
            "tokens": {
                "input": 400,
                "output": 80,
                "cache_write_5m": 0,
                "cache_write_1h": 10,
                "cache_read": 0,
            },
            "cost_usd": "0.002500",
            "failures": 1,
            "batch_saved_usd": "0.000000",
        }
    ]


def test_it_covers_the_last_30_days_by_default(staff_client: APIClient, ledger: Ledger) -> None:
    body = get(staff_client, group_by="user")

    until = datetime.fromisoformat(body["until"])
    since = datetime.fromisoformat(body["since"])
    assert until - since == timedelta(days=30)
    assert abs(until - ledger.now) < timedelta(minutes=1)
    # Bob's job of 40 days ago (cost 1.000000 and a failure) is not in it.
    want = expected_report(ledger, group_by="user", since=since, until=until)
    assert body["rows"] == want["rows"]
    assert body["totals"]["failures"] == 1
    assert body["totals"]["cost_usd"] == "0.006800"


def test_it_shows_a_user_only_their_own_spend(
    alice_client: APIClient, bob: Any, ledger: Ledger
) -> None:
    since, until = ledger.now - timedelta(days=60), ledger.now + timedelta(minutes=1)
    body = get(alice_client, group_by="feature", since=iso(since), until=iso(until))

    want = expected_report(
        ledger,
        group_by="feature",
        since=since,
        until=until,
        keep=lambda row: row.user.username == "alice",
    )
    assert body["rows"] == want["rows"]
    assert body["totals"] == want["totals"]
    assert body["filters"]["user"] == "alice"
    # Bob's summarize spend (0.004 today, 1.0 forty days ago) is not in Alice's summarize row.
    assert [row["cost_usd"] for row in body["rows"] if row["key"] == "summarize"] == ["0.000300"]


def test_it_refuses_a_user_filter_from_a_user_who_is_not_staff(
    alice_client: APIClient, ledger: Ledger
) -> None:
    response = alice_client.get(URL, {"user": "bob"})

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert response.json()["detail"] == {"field": "user"}


def test_it_accepts_a_user_filter_naming_oneself(alice_client: APIClient, ledger: Ledger) -> None:
    body = get(alice_client, user="alice", since="60d")

    assert body["filters"]["user"] == "alice"
    assert body["totals"]["cost_usd"] == "0.002800"


@pytest.mark.parametrize("by", ["username", "id"])
def test_it_lets_staff_filter_by_user(
    staff_client: APIClient, bob: Any, ledger: Ledger, by: str
) -> None:
    since, until = ledger.now - timedelta(days=60), ledger.now + timedelta(minutes=1)
    value = bob.username if by == "username" else str(bob.id)
    body = get(staff_client, group_by="model", user=value, since=iso(since), until=iso(until))

    want = expected_report(
        ledger, group_by="model", since=since, until=until, keep=lambda row: row.user == bob
    )
    assert body["rows"] == want["rows"]
    assert body["totals"] == want["totals"]
    assert body["filters"] == {"feature": None, "model": None, "user": "bob"}


def test_it_filters_by_feature_and_model(staff_client: APIClient, ledger: Ledger) -> None:
    since, until = ledger.now - timedelta(days=60), ledger.now + timedelta(minutes=1)
    body = get(
        staff_client,
        group_by="user",
        feature="summarize",
        model="claude-haiku-4-5",
        since=iso(since),
        until=iso(until),
    )

    def keep(row: Any) -> bool:
        return bool(row.feature == "summarize" and row.model == "claude-haiku-4-5")

    want = expected_report(ledger, group_by="user", since=since, until=until, keep=keep)
    assert body["rows"] == want["rows"]
    assert [row["key"] for row in body["rows"]] == ["bob", "alice"]


def test_it_includes_since_and_excludes_until(staff_client: APIClient, ledger: Ledger) -> None:
    bobs = ledger.now - timedelta(hours=2)
    correction = ledger.now - timedelta(hours=1)
    body = get(staff_client, since=iso(bobs), until=iso(correction))

    # [Bob's row's time, the correction's time): Bob's row is in, the correction is not.
    assert body["totals"]["cost_usd"] == "0.004000"
    assert body["totals"]["attempts"] == 1
    assert get(staff_client, since=iso(correction), until=iso(ledger.now))["totals"] == {
        "jobs": 1,
        "attempts": 0,
        "tokens": {
            "input": 400,
            "output": 80,
            "cache_write_5m": 0,
            "cache_write_1h": 10,
            "cache_read": 0,
        },
        "cost_usd": "-0.009500",
        "failures": 0,
        "batch_saved_usd": "0.000000",
    }


def test_it_reads_a_date_until_as_the_whole_day(staff_client: APIClient, ledger: Ledger) -> None:
    oldest = ledger.now - timedelta(days=40)
    body = get(staff_client, group_by="day", since=oldest.date(), until=oldest.date())

    assert body["since"] == f"{oldest.date()}T00:00:00Z"
    assert body["until"] == f"{oldest.date() + timedelta(days=1)}T00:00:00Z"
    assert body["rows"] == [
        {
            "key": oldest.date().isoformat(),
            "jobs": 1,
            "attempts": 1,
            "tokens": {
                "input": 7,
                "output": 0,
                "cache_write_5m": 0,
                "cache_write_1h": 0,
                "cache_read": 0,
            },
            "cost_usd": "1.000000",
            "failures": 1,
            "batch_saved_usd": "0.000000",
        }
    ]


def test_it_reads_relative_since(staff_client: APIClient, ledger: Ledger) -> None:
    week = get(staff_client, since="7d")
    two_hours = get(staff_client, since="150m")
    day = get(staff_client, since="24h")

    assert week["totals"]["cost_usd"] == "0.006800"
    assert two_hours["totals"]["cost_usd"] == "-0.005500"  # Bob's 0.004 and the correction.
    assert day["totals"]["jobs"] == 2


def test_it_reads_an_offset_whose_plus_sign_was_not_encoded(staff_client: APIClient) -> None:
    body = get(staff_client, since="2025-01-01T02:00:00 02:00", until="2025-01-02T00:00:00Z")

    assert body["since"] == "2025-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"group_by": "week"}, "group_by"),
        ({"since": "yesterday"}, "since"),
        ({"since": "7y"}, "since"),
        ({"since": "99999999d"}, "since"),
        ({"until": "2025-02-30"}, "until"),
        ({"since": "2025-03-02", "until": "2025-03-01"}, "since"),
        ({"since": "1h", "until": "2h"}, "since"),
        ({"user": "nobody"}, "user"),
        ({"user": "²"}, "user"),  # a digit to isdigit(), not to int()
    ],
)
def test_it_refuses_bad_filters_naming_the_field(
    staff_client: APIClient, params: dict[str, str], field: str
) -> None:
    response = staff_client.get(URL, params)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"
    assert response.json()["detail"] == {"field": field}


def test_it_starts_the_default_range_where_dates_start_for_an_early_until(
    staff_client: APIClient,
) -> None:
    response = staff_client.get(URL, {"until": "0001-01-10"})

    assert response.status_code == 200, response.content
    assert response.json()["since"] == "0001-01-01T00:00:00Z"
    assert response.json()["until"] == "0001-01-11T00:00:00Z"


def test_it_needs_authentication(db: None) -> None:
    assert APIClient().get(URL).status_code == 401


@pytest.mark.parametrize("group_by", GROUPS)
def test_it_answers_in_a_fixed_number_of_queries(ledger: Ledger, group_by: str) -> None:
    now = ledger.now + timedelta(minutes=1)
    with CaptureQueriesContext(connection) as queries:
        cost_report(group_by=group_by, since=now - timedelta(days=60), until=now)

    # The ledger's GROUP BY, the failures' GROUP BY; by model or day the distinct jobs of the
    # totals (a job may be in two groups), by user the usernames.
    assert len(queries) == (2 if group_by == "feature" else 3)
