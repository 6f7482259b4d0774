"""Budget forecasts: the rule by hand on plain numbers, then on a synthetic ledger history."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from ledger.forecast import budget_forecast, forecast_from_spend
from ledger.models import Budget
from tests.ledger.spend_history import make_job, spend

NOON = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
"""The moment of the synthetic history's forecasts: 12 hours into a day, 9.5 days into March."""


def test_it_matches_the_hand_computed_forecast() -> None:
    # $3 spent, $1.50 of it in the last 3 hours: 0.5 $/h; 18 hours left, limit $10.
    forecast = forecast_from_spend(
        spent_usd=Decimal("3"),
        limit_usd=Decimal("10"),
        recent_spend_usd=Decimal("1.5"),
        lookback_hours=Decimal("3"),
        now=datetime(2025, 3, 10, 6, 0, tzinfo=UTC),
        window_end=datetime(2025, 3, 11, 0, 0, tzinfo=UTC),
    )
    assert forecast.burn_rate_usd_per_hour == Decimal("0.500000")
    assert forecast.projected_spend_usd == Decimal("12.000000")  # 3 + 0.5 x 18
    assert forecast.projected_exhaustion_at == datetime(2025, 3, 10, 20, 0, tzinfo=UTC)  # +14 h


def test_no_recent_spend_means_no_exhaustion() -> None:
    forecast = forecast_from_spend(
        spent_usd=Decimal("9.99"),
        limit_usd=Decimal("10"),
        recent_spend_usd=Decimal("0"),
        lookback_hours=Decimal("24"),
        now=NOON,
        window_end=NOON + timedelta(hours=12),
    )
    assert forecast.burn_rate_usd_per_hour == 0
    assert forecast.projected_spend_usd == Decimal("9.990000")
    assert forecast.projected_exhaustion_at is None


def test_exhaustion_after_the_window_resets_is_not_reported() -> None:
    # 1 $/h with $5 left would run out in 5 h, but the window ends in 4 h.
    forecast = forecast_from_spend(
        spent_usd=Decimal("5"),
        limit_usd=Decimal("10"),
        recent_spend_usd=Decimal("24"),
        lookback_hours=Decimal("24"),
        now=NOON,
        window_end=NOON + timedelta(hours=4),
    )
    assert forecast.projected_spend_usd == Decimal("9.000000")
    assert forecast.projected_exhaustion_at is None


def test_a_budget_at_its_limit_is_exhausted_now() -> None:
    forecast = forecast_from_spend(
        spent_usd=Decimal("10"),
        limit_usd=Decimal("10"),
        recent_spend_usd=Decimal("0"),
        lookback_hours=Decimal("24"),
        now=NOON,
        window_end=NOON + timedelta(hours=12),
    )
    assert forecast.projected_exhaustion_at == NOON


@pytest.fixture
def history(alice: Any, bob: Any) -> None:
    """Feature "reports" (alice) and bob's "chat", around 2025-03-10 12:00 UTC."""
    reports = make_job(alice, feature="reports")
    spend(reports, "40", datetime(2025, 2, 28, 20, 0, tzinfo=UTC))  # last month
    spend(reports, "20", datetime(2025, 3, 2, 9, 0, tzinfo=UTC))
    spend(reports, "5", datetime(2025, 3, 9, 23, 0, tzinfo=UTC))  # yesterday
    spend(reports, "2", datetime(2025, 3, 10, 1, 0, tzinfo=UTC))
    spend(reports, "1", datetime(2025, 3, 10, 6, 0, tzinfo=UTC))
    spend(reports, "3", datetime(2025, 3, 10, 11, 0, tzinfo=UTC))
    chat = make_job(bob, feature="chat")
    spend(chat, "1.5", datetime(2025, 3, 10, 3, 0, tzinfo=UTC))
    spend(chat, "1.5", datetime(2025, 3, 10, 9, 0, tzinfo=UTC))


def feature_budget(period: str, limit: str) -> Budget:
    return Budget.objects.create(
        scope=Budget.Scope.FEATURE, feature="reports", period=period, limit_usd=Decimal(limit)
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("history")
class TestForecastFromTheLedger:
    def test_a_day_budget_burns_at_todays_pace_only(self) -> None:
        # Today until noon: 2 + 1 + 3 = $6 over 12 h (yesterday's $5 is not today's pace).
        forecast = budget_forecast(budget=feature_budget("day", "10"), at=NOON)
        assert forecast.lookback_hours == 12
        assert forecast.burn_rate_usd_per_hour == Decimal("0.500000")
        assert forecast.projected_spend_usd == Decimal("12.000000")  # 6 + 0.5 x 12
        assert forecast.projected_exhaustion_at == datetime(2025, 3, 10, 20, 0, tzinfo=UTC)

    def test_a_month_budget_burns_at_the_last_24_hours_pace(self) -> None:
        # Spent in March: 20 + 5 + 6 = $31. Last 24 h: 5 + 6 = $11, 11/24 $/h.
        # 516 h left (to April 1st): 31 + 11/24 x 516 = $267.50. $66 left lasts 144 h.
        forecast = budget_forecast(budget=feature_budget("month", "97"), at=NOON)
        assert forecast.lookback_hours == 24
        assert forecast.burn_rate_usd_per_hour == Decimal("0.458333")
        assert forecast.projected_spend_usd == Decimal("267.500000")
        assert forecast.projected_exhaustion_at == datetime(2025, 3, 16, 12, 0, tzinfo=UTC)

    def test_a_user_budget_counts_only_its_users_rows(self, bob: Any) -> None:
        budget = Budget.objects.create(
            scope=Budget.Scope.USER, user=bob, period="day", limit_usd=Decimal("5")
        )
        forecast = budget_forecast(budget=budget, at=NOON)
        assert forecast.burn_rate_usd_per_hour == Decimal("0.250000")  # $3 over 12 h
        assert forecast.projected_spend_usd == Decimal("6.000000")
        assert forecast.projected_exhaustion_at == datetime(2025, 3, 10, 20, 0, tzinfo=UTC)

    def test_the_look_back_follows_the_setting(self, settings: Any) -> None:
        # The last 4 h hold only the 11:00 row: $3 / 4 h; $4 left lasts 5 h 20 min.
        settings.LEDGER_FORECAST_WINDOW_HOURS = 4
        forecast = budget_forecast(budget=feature_budget("day", "10"), at=NOON)
        assert forecast.burn_rate_usd_per_hour == Decimal("0.750000")
        assert forecast.projected_spend_usd == Decimal("15.000000")
        assert forecast.projected_exhaustion_at == datetime(2025, 3, 10, 17, 20, tzinfo=UTC)

    def test_at_the_start_of_a_day_there_is_no_rate_yet(self) -> None:
        midnight = datetime(2025, 3, 10, 0, 0, tzinfo=UTC)
        forecast = budget_forecast(budget=feature_budget("day", "10"), at=midnight)
        assert forecast.lookback_hours == 0
        assert forecast.burn_rate_usd_per_hour == 0
        assert forecast.projected_exhaustion_at is None
