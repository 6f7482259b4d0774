"""The Budget admin: a staff member sets a budget with the add form and reads its window and
forecast on the list, in a bounded number of queries."""

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.budgets import window_bounds
from ledger.models import Budget, BudgetReservation
from tests.conftest import make_user
from tests.ledger.spend_history import make_job, spend

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/ledger/budget/"
ADD = "/admin/ledger/budget/add/"


@pytest.fixture
def staff_client() -> Client:
    user = make_user(
        "sam", "add_budget", "change_budget", "view_budget", "view_user", is_staff=True
    )
    client = Client()
    client.force_login(user)
    return client


def add_form(**overrides: str) -> dict[str, str]:
    form = {
        "scope": "feature",
        "feature": "email-classify",
        "user": "",
        "period": "day",
        "limit_usd": "5",
        "soft_alert_percent": "80",
        "on_exceed": "defer",
        "enabled": "on",
        "_save": "Save",
    }
    form.update(overrides)
    return form


def test_a_staff_member_adds_a_feature_budget(staff_client: Client) -> None:
    assert staff_client.get(ADD).status_code == 200
    response = staff_client.post(ADD, add_form())
    assert response.status_code == 302, response.content.decode()[:2000]
    budget = Budget.objects.get()
    assert (budget.scope, budget.feature, budget.user_id) == ("feature", "email-classify", None)
    assert (budget.period, budget.limit_usd, budget.on_exceed) == ("day", Decimal("5"), "defer")
    assert budget.enabled


def test_a_staff_member_adds_a_user_budget(staff_client: Client, alice: Any) -> None:
    response = staff_client.post(
        ADD, add_form(scope="user", feature="", user=str(alice.id), period="month")
    )
    assert response.status_code == 302
    budget = Budget.objects.get()
    assert (budget.scope, budget.user_id, budget.name) == ("user", alice.id, "user:alice")


def test_the_add_form_refuses_a_budget_whose_scope_does_not_match(
    staff_client: Client, alice: Any
) -> None:
    response = staff_client.post(ADD, add_form(scope="user", feature="email-classify"))
    assert response.status_code == 200
    page = response.content.decode()
    assert "A user budget names a user and no feature." in page
    assert "is violated" not in page  # the check constraint behind it is not repeated
    response = staff_client.post(ADD, add_form(user=str(alice.id)))
    assert "A feature budget names a feature and no user." in response.content.decode()
    assert not Budget.objects.exists()


def test_the_list_shows_the_window_the_bar_and_the_forecast(
    staff_client: Client, alice: Any
) -> None:
    budget = Budget.objects.create(
        scope="feature", feature="email-classify", period="month", limit_usd=Decimal("2")
    )
    job = make_job(alice)
    spend(job, "1.700000")
    BudgetReservation.objects.create(
        budget=budget,
        window_start=window_bounds("month")[0],
        job=job,
        attempt=99,
        amount_usd=Decimal("0.100000"),
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    page = staff_client.get(CHANGELIST).content.decode()
    assert "feature:email-classify" in page
    assert "$1.70" in page  # spent
    assert "$0.10" in page  # reserved
    assert "$0.20" in page  # remaining
    assert "budget-bar-soft" in page  # 85 % is past the 80 % soft alert
    assert "85.0%" in page
    assert "at end" in page


def test_an_exhausted_budget_shows_a_red_bar(staff_client: Client, alice: Any) -> None:
    Budget.objects.create(
        scope="user", user=alice, period="day", limit_usd=Decimal("1"), on_exceed="reject"
    )
    spend(make_job(alice), "1")
    page = staff_client.get(CHANGELIST).content.decode()
    assert "budget-bar-exhausted" in page and "exhausted" in page
    assert "user:alice" in page


def test_the_change_page_shows_the_current_window(staff_client: Client, alice: Any) -> None:
    budget = Budget.objects.create(
        scope="feature", feature="email-classify", period="day", limit_usd=Decimal("10")
    )
    spend(make_job(alice), "0.5")
    page = staff_client.get(f"{CHANGELIST}{budget.id}/change/").content.decode()
    assert "Current window" in page and "$0.50" in page


def test_the_list_reads_each_budget_in_a_few_queries(staff_client: Client, alice: Any) -> None:
    def list_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert staff_client.get(CHANGELIST).status_code == 200
        return len(queries)

    spend(make_job(alice), "0.5")
    for n in range(2):
        Budget.objects.create(
            scope="feature", feature=f"f{n}", period="day", limit_usd=Decimal("10")
        )
    two = list_queries()
    for n in range(2, 6):
        Budget.objects.create(
            scope="feature", feature=f"f{n}", period="day", limit_usd=Decimal("10")
        )
    six = list_queries()
    # Window row, ledger spend (no window row yet), reservations, recent spend: 4 per budget,
    # whatever the number of columns that show them.
    assert six - two <= 4 * 4


def test_a_staff_member_without_the_permission_cannot_see_budgets() -> None:
    client = Client()
    client.force_login(make_user("nina", is_staff=True))
    assert client.get(CHANGELIST).status_code == 403


def test_an_empty_list_says_how_to_add_a_budget(staff_client):
    html = staff_client.get(CHANGELIST).content.decode()
    hint = html.split('id="budget-empty-hint"')[1].split("</div>")[0]
    assert f'href="{ADD}"' in hint  # the add form, for whoever may add
    assert "llm_key create" in hint and "max_budget_usd" in hint  # a key's budget
    Budget.objects.create(scope="feature", feature="email-classify", limit_usd=Decimal("5"))
    assert 'id="budget-empty-hint"' not in staff_client.get(CHANGELIST).content.decode()
    # Filtered to none is not empty: the usual "0 budgets" stays.
    filtered = staff_client.get(CHANGELIST + "?q=nothing-matches").content.decode()
    assert 'id="budget-empty-hint"' not in filtered


def test_the_empty_hint_offers_the_add_form_only_to_who_may_add():
    viewer = Client()
    viewer.force_login(make_user("vera", "view_budget", is_staff=True))
    hint = viewer.get(CHANGELIST).content.decode().split('id="budget-empty-hint"')[1]
    assert ADD not in hint.split("</div>")[0]
