"""The admin's cost report page and its CSV download: staff who may view the ledger get them;
anyone else does not."""

import csv
import io
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from tests.conftest import make_user
from tests.ledger.cost_data import Ledger, build_ledger, expected_report

PAGE = "/admin/ledger/costentry/report/"
CSV = "/admin/ledger/costentry/report/csv/"


@pytest.fixture
def ledger(alice: Any, bob: Any) -> Ledger:
    return build_ledger(alice, bob)


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def staff(db: None) -> Client:
    return client_for(make_user("sam", "view_costentry", is_staff=True))


def test_it_downloads_the_report_as_csv(staff: Client, ledger: Ledger) -> None:
    since, until = ledger.now - timedelta(days=60), ledger.now + timedelta(minutes=1)
    response = staff.get(
        CSV, {"group_by": "user", "since": since.isoformat(), "until": until.isoformat()}
    )

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="costs-by-user-')
    header, *rows, totals = list(csv.reader(io.StringIO(response.content.decode())))
    want = expected_report(ledger, group_by="user", since=since, until=until)
    assert header[:2] == ["user", "jobs"]
    assert [[row[0], row[-3], row[-2]] for row in rows] == [
        [row["key"], row["cost_usd"], str(row["failures"])] for row in want["rows"]
    ]
    assert totals[0] == "TOTAL" and totals[-3] == want["totals"]["cost_usd"] == "1.006800"


def test_it_shows_the_report_page_with_a_link_to_its_csv(staff: Client, ledger: Ledger) -> None:
    response = staff.get(PAGE, {"group_by": "model", "feature": "summarize", "since": "7d"})

    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="cost-report"' in page
    assert f"{CSV}?group_by=model&amp;feature=summarize&amp;since=7d" in page
    assert "claude-sonnet-4-6" in page and "0.004000" in page
    assert "claude-opus" not in page
    # The ledger's changelist links to it.
    assert PAGE in staff.get("/admin/ledger/costentry/").content.decode()


def test_it_shows_a_bad_filter_on_the_page_and_refuses_it_in_the_csv(staff: Client) -> None:
    page = staff.get(PAGE, {"since": "soon"})
    download = staff.get(CSV, {"since": "soon"})

    assert page.status_code == 200
    assert 'id="report-error"' in page.content.decode()
    assert download.status_code == 400


def test_it_sends_a_user_who_is_not_staff_to_the_login(alice: Any, ledger: Ledger) -> None:
    response = client_for(alice).get(CSV)

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_it_refuses_staff_who_may_not_view_the_ledger(db: None, ledger: Ledger) -> None:
    client = client_for(make_user("pat", is_staff=True))

    assert client.get(CSV).status_code == 403
    assert client.get(PAGE).status_code == 403
