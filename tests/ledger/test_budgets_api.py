"""GET /api/v1/budgets/ (and /<id>/): every budget's window and forecast, for staff only."""

from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from keys.testing import api_key_for
from ledger.budgets import window_bounds
from ledger.forecast import budget_forecast
from ledger.models import Budget
from tests.conftest import make_user
from tests.ledger.spend_history import make_job, spend

pytestmark = pytest.mark.django_db

URL = "/api/v1/budgets/"


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(user)}")
    return client


@pytest.fixture
def staff_client() -> APIClient:
    return client_for(make_user("sam", "view_budget", is_staff=True))


@pytest.fixture
def budgets(alice: Any) -> dict[str, Budget]:
    feature = Budget.objects.create(
        scope="feature",
        feature="email-classify",
        period="month",
        limit_usd=Decimal("2"),
        on_exceed="defer",
    )
    user = Budget.objects.create(
        scope="user", user=alice, period="day", limit_usd=Decimal("1"), enabled=False
    )
    spend(make_job(alice), "0.500000")
    return {"feature": feature, "user": user}


def test_it_lists_every_budget_with_its_window_and_forecast(
    staff_client: APIClient, budgets: dict[str, Budget]
) -> None:
    response = staff_client.get(URL)
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 2
    feature, user = body["results"]
    assert set(feature) == {
        "id",
        "name",
        "scope",
        "feature",
        "user",
        "user_id",
        "api_key_id",
        "period",
        "limit_usd",
        "enabled",
        "on_exceed",
        "soft_alert_percent",
        "window",
        "spent_usd",
        "reserved_usd",
        "remaining_usd",
        "percent_used",
        "exhausted",
        "forecast",
    }
    start, end = window_bounds("month")
    assert feature["id"] == budgets["feature"].id
    assert feature["name"] == "feature:email-classify"
    assert (feature["scope"], feature["feature"], feature["user"]) == (
        "feature",
        "email-classify",
        None,
    )
    assert (feature["period"], feature["on_exceed"], feature["enabled"]) == (
        "month",
        "defer",
        True,
    )
    assert feature["limit_usd"] == "2.000000"
    assert feature["soft_alert_percent"] == 80
    assert datetime.fromisoformat(feature["window"]["start"]) == start
    assert datetime.fromisoformat(feature["window"]["end"]) == end
    assert feature["spent_usd"] == "0.500000"
    assert feature["reserved_usd"] == "0.000000"
    assert feature["remaining_usd"] == "1.500000"
    assert feature["percent_used"] == "25.0"
    assert feature["exhausted"] is False
    forecast = feature["forecast"]
    assert set(forecast) == {
        "burn_rate_usd_per_hour",
        "projected_spend_usd",
        "projected_exhaustion_at",
    }
    # $0.50 in the last 24 h: 0.5/24 = 0.020833 $/h.
    assert forecast["burn_rate_usd_per_hour"] == "0.020833"
    assert Decimal(forecast["projected_spend_usd"]) >= Decimal("0.5")

    assert (user["scope"], user["user"], user["user_id"], user["feature"]) == (
        "user",
        "alice",
        budgets["user"].user_id,
        None,
    )
    assert user["enabled"] is False
    assert user["spent_usd"] == "0.500000" and user["percent_used"] == "50.0"


def test_the_detail_matches_the_forecast_selector(
    staff_client: APIClient, budgets: dict[str, Budget]
) -> None:
    budget = budgets["feature"]
    body = staff_client.get(f"{URL}{budget.id}/").json()
    expected = budget_forecast(budget=budget, at=timezone.now())
    assert body["id"] == budget.id
    assert body["forecast"]["burn_rate_usd_per_hour"] == f"{expected.burn_rate_usd_per_hour:.6f}"
    exhaustion = body["forecast"]["projected_exhaustion_at"]
    if expected.projected_exhaustion_at is None:
        assert exhaustion is None
    else:
        # A moment apart: the same forecast to within a second or so.
        delta = datetime.fromisoformat(exhaustion) - expected.projected_exhaustion_at
        assert abs(delta.total_seconds()) < 5


def test_an_unknown_budget_is_404(staff_client: APIClient) -> None:
    response = staff_client.get(f"{URL}999999/")
    assert response.status_code == 404
    assert response.json()["code"] == "budget_not_found"


def test_a_user_who_is_not_staff_is_refused(alice_client: APIClient, budgets: Any) -> None:
    for url in (URL, f"{URL}{budgets['feature'].id}/"):
        response = alice_client.get(url)
        assert response.status_code == 403
        assert response.json()["code"] == "permission_denied"


def test_any_staff_member_may_read_them(budgets: Any) -> None:
    client = client_for(make_user("nina", is_staff=True))
    assert client.get(URL).status_code == 200


def test_an_anonymous_request_is_401(budgets: Any) -> None:
    response = APIClient().get(URL)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_the_list_reads_each_budget_in_a_few_queries(
    staff_client: APIClient, django_assert_max_num_queries: Any, alice: Any
) -> None:
    for n in range(10):
        Budget.objects.create(
            scope="feature", feature=f"f{n}", period="day", limit_usd=Decimal("10")
        )
    # Auth and count and page: a handful; then 4 per budget (window, spend, reserved, recent).
    with django_assert_max_num_queries(6 + 4 * 10):
        assert staff_client.get(URL).status_code == 200
