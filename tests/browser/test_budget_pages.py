"""Budgets as a staff member sees them: real admin pages in headless Chromium (Playwright).

Each test fails on any server error (HTTP 4xx/5xx) or any console error in the browser (the
``page`` fixture of the DLQ page tests).
"""

from decimal import Decimal

import pytest

from ledger.models import Budget
from tests.browser.test_dlq_pages import SCREENSHOTS, log_in, page  # noqa: F401  (fixture)
from tests.conftest import make_user
from tests.ledger.spend_history import make_job, spend

pytestmark = pytest.mark.django_db(transaction=True)


def make_budget_keeper(username: str = "bea") -> None:
    make_user(
        username,
        "add_budget",
        "change_budget",
        "view_budget",
        "view_user",
        is_staff=True,
        password="pw-staff",
    )


def test_a_staff_member_watches_budgets_and_sets_a_new_one(page, live_server) -> None:  # noqa: F811
    owner = make_user("carol")
    Budget.objects.create(
        scope="feature", feature="email-classify", period="month", limit_usd=Decimal("2")
    )
    Budget.objects.create(scope="user", user=owner, period="day", limit_usd=Decimal("1"))
    job = make_job(owner)
    spend(job, "1.700000")  # 85 % of the feature budget, 170 % of carol's: both bars coloured
    make_budget_keeper()
    log_in(page, live_server, "bea")

    page.get_by_role("link", name="Budgets", exact=True).click()
    page.wait_for_selector("#result_list")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 2
    assert page.locator(".budget-bar-soft").count() == 1
    assert page.locator(".budget-bar-exhausted").count() == 1
    feature_row = rows.filter(has_text="feature:email-classify")
    assert "$1.70" in feature_row.inner_text()  # spent
    assert "$0.30" in feature_row.inner_text()  # remaining
    assert "at end" in feature_row.locator(".budget-forecast").inner_text()
    assert "exhausted" in rows.filter(has_text="user:carol").inner_text()
    page.screenshot(path=SCREENSHOTS / "budget-list.png", full_page=True)

    # A new feature budget from the add form.
    page.click("text=Add budget")
    page.wait_for_selector("#budget_form")
    page.select_option("select[name=scope]", "feature")
    page.fill("input[name=feature]", "summarize")
    page.select_option("select[name=period]", "day")
    page.fill("input[name=limit_usd]", "5")
    page.select_option("select[name=on_exceed]", "defer")
    page.screenshot(path=SCREENSHOTS / "budget-add.png", full_page=True)
    page.click("input[name=_save]")
    page.wait_for_selector("ul.messagelist")
    assert page.locator("#result_list tbody tr").count() == 3
    budget = Budget.objects.get(feature="summarize")
    assert (budget.period, budget.limit_usd, budget.on_exceed) == ("day", Decimal("5"), "defer")

    # Switched off from the list, with the editable "enabled" column.
    row = page.locator("#result_list tbody tr").filter(has_text="feature:summarize")
    row.locator("input[type=checkbox][name$=-enabled]").uncheck()
    page.click("input[name=_save]")
    page.wait_for_selector("ul.messagelist")
    budget.refresh_from_db()
    assert not budget.enabled


def test_the_add_form_explains_a_scope_mismatch(page, live_server) -> None:  # noqa: F811
    make_budget_keeper()
    log_in(page, live_server, "bea")
    page.goto(f"{live_server.url}/admin/ledger/budget/add/")
    page.select_option("select[name=scope]", "user")
    page.fill("input[name=feature]", "summarize")
    page.fill("input[name=limit_usd]", "5")
    page.click("input[name=_save]")
    page.wait_for_selector(".errornote")
    assert "A user budget names a user and no feature." in page.content()
    assert not Budget.objects.exists()
