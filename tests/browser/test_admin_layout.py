"""What a new staff member sees first in the admin, at a laptop's 1,400 px and a phone's 390 px:
the DLQ and budget lists keep their key columns in view, the DLQ detail's actions look like
buttons, and the index links the cost report under readable section names.

Headless Chromium (Playwright); each test fails on any console error or HTTP error (the ``page``
fixture of the DLQ page tests). Screenshots go to ``SCREENSHOT_DIR``.
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from dlq.models import FailureRecord
from ledger.models import Budget
from tests.browser.test_budget_pages import make_budget_keeper
from tests.browser.test_dlq_pages import SCREENSHOTS, log_in, make_operator, page  # noqa: F401
from tests.conftest import make_user
from tests.ledger.spend_history import make_job as make_spending_job
from tests.ledger.spend_history import spend
from tests.ops.test_dashboard import dead_letter, ledger_row, make_job

pytestmark = pytest.mark.django_db(transaction=True)

WIDE, NARROW = 1400, 390

HEADER_BOXES = """(selectors) => selectors.map((selector) => {
    const cell = document.querySelector(selector);
    if (!cell) {
        return {selector: selector, found: false};
    }
    const box = cell.getBoundingClientRect();
    // The nearest edge that cuts it off: the viewport, or a container that clips or scrolls.
    let clip = window.innerWidth;
    let scrolls = false;
    for (let node = cell.parentElement; node && node !== document.body; node = node.parentElement) {
        const overflow = getComputedStyle(node).overflowX;
        if (overflow !== "visible") {
            clip = Math.min(clip, node.getBoundingClientRect().right);
            scrolls = scrolls || overflow === "auto" || overflow === "scroll";
        }
    }
    return {
        selector: selector, found: true, left: box.left, right: box.right, width: box.width,
        clip: clip, scrolls: scrolls,
    };
})"""

PAGE_WIDTH = "() => [document.documentElement.scrollWidth, window.innerWidth]"


def assert_in_view(page, selectors: list[str]) -> None:  # noqa: F811
    """Every header cell is on screen, whole: nothing to scroll to at this width."""
    for box in page.evaluate(HEADER_BOXES, selectors):
        assert box["found"], box
        assert box["width"] > 0 and box["left"] >= 0, box
        assert box["right"] <= box["clip"] + 0.5, f"{box['selector']} is cut off: {box}"


def assert_reachable(page, selectors: list[str]) -> None:  # noqa: F811
    """On a phone the table may scroll sideways, but inside its own box: the page does not."""
    scroll_width, viewport = page.evaluate(PAGE_WIDTH)
    assert scroll_width <= viewport, f"the page scrolls sideways: {scroll_width} > {viewport}"
    for box in page.evaluate(HEADER_BOXES, selectors):
        assert box["found"], box
        assert box["right"] <= box["clip"] + 0.5 or box["scrolls"], box


def open_failures() -> FailureRecord:
    """Three dead letters with long names and the widest values a row shows, the way a real DLQ
    looks after a while."""
    owner = make_user("owen")
    now = timezone.now()
    records = []
    for n, (feature, model, reason, state) in enumerate(
        [
            ("support-ticket-summary", "claude-sonnet-4-5-20250929", "server_error", "open"),
            ("email-classify", "claude-haiku-4-5-20251001", "authentication_failed", "requeued"),
            ("invoice-extraction", "claude-opus-4-1-20250805", "context_too_long", "resolved"),
        ]
    ):
        job = make_job(
            owner, feature=feature, model=model, status="failed", cost_usd=Decimal("12.345678")
        )
        record = dead_letter(job, now - timedelta(hours=n * 5, minutes=13), "CRITICAL", state)
        FailureRecord.objects.filter(pk=record.pk).update(
            reason_code=reason, http_status=529, attempts=12
        )
        records.append(record)
    return records[0]


DLQ_KEY_COLUMNS = [
    "#result_list th.column-state",
    "#result_list th.column-job_link",
    "#result_list th.column-cost_so_far",
    "#result_list th.column-age",
]
BUDGET_KEY_COLUMNS = [
    "#result_list th.column-forecast",
    "#result_list th.column-when_exceeded",
    "#result_list th.column-enabled",
]


def test_the_dlq_list_keeps_state_job_cost_and_age_in_view(page, live_server) -> None:  # noqa: F811
    open_failures()
    make_operator()
    log_in(page, live_server, "olga")
    page.goto(f"{live_server.url}/admin/dlq/failurerecord/")
    page.wait_for_selector("#result_list")
    page.screenshot(path=SCREENSHOTS / "dlq-list-1400.png", full_page=True)
    assert_in_view(page, DLQ_KEY_COLUMNS)
    # A model name stays on one line.
    model = page.locator("#result_list td.field-feature_model .dlq-model").first
    assert model.evaluate("(cell) => getComputedStyle(cell).whiteSpace") == "nowrap"

    page.set_viewport_size({"width": NARROW, "height": 844})
    page.reload()
    page.wait_for_selector("#result_list")
    page.screenshot(path=SCREENSHOTS / "dlq-list-390.png", full_page=True)
    assert_reachable(page, DLQ_KEY_COLUMNS)


def test_the_budget_list_keeps_forecast_on_exceed_and_enabled_in_view(page, live_server) -> None:  # noqa: F811
    owner = make_user("carol")
    Budget.objects.create(
        scope="feature", feature="support-ticket-summary", period="month", limit_usd=Decimal("2")
    )
    Budget.objects.create(scope="user", user=owner, period="day", limit_usd=Decimal("1"))
    spend(make_spending_job(owner, feature="support-ticket-summary"), "1.700000")
    make_budget_keeper()
    log_in(page, live_server, "bea")
    page.goto(f"{live_server.url}/admin/ledger/budget/")
    page.wait_for_selector("#result_list")
    page.screenshot(path=SCREENSHOTS / "budget-list-1400.png", full_page=True)
    assert_in_view(page, BUDGET_KEY_COLUMNS)

    page.set_viewport_size({"width": NARROW, "height": 844})
    page.reload()
    page.wait_for_selector("#result_list")
    page.screenshot(path=SCREENSHOTS / "budget-list-390.png", full_page=True)
    assert_reachable(page, BUDGET_KEY_COLUMNS)


def test_the_dlq_detail_actions_look_like_buttons(page, live_server) -> None:  # noqa: F811
    record = open_failures()
    make_operator()
    log_in(page, live_server, "olga")
    page.goto(f"{live_server.url}/admin/dlq/failurerecord/{record.id}/change/")
    page.wait_for_selector("#record-requeue")
    page.screenshot(path=SCREENSHOTS / "dlq-detail-buttons.png")
    history = page.locator(".object-tools a.historylink")
    history_height = history.bounding_box()["height"]
    for action in ("requeue", "requeue_with_model", "resolve", "ignore"):
        button = page.locator(f"#record-{action}")
        background = button.evaluate("(b) => getComputedStyle(b).backgroundColor")
        assert background not in ("rgba(0, 0, 0, 0)", "transparent"), (action, background)
        assert button.evaluate("(b) => getComputedStyle(b).cursor") == "pointer"
        assert abs(button.bounding_box()["height"] - history_height) <= 2, action


def test_the_admin_index_links_the_cost_report_and_names_every_section(page, live_server) -> None:  # noqa: F811
    get_user_model().objects.create_superuser("root", password="pw-staff")
    job = make_job(make_user("owen"), feature="email-classify")
    ledger_row(job, timezone.now(), cost="0.250000")
    log_in(page, live_server, "root")
    page.screenshot(path=SCREENSHOTS / "admin-index.png", full_page=True)
    text = page.locator("#content-main").inner_text()
    assert "django_rq" not in text.lower(), "a raw app label on the index"
    assert "queues (rq)" in text.lower()
    # What needs someone first: the dead letters, then the budgets.
    sections = page.locator("#content-main caption a.section").all_inner_texts()
    assert [s.lower() for s in sections[:2]] == ["dead-letter queue", "ledger"], sections
    first_row = page.locator("#content-main .app-ledger tr[class^='model-']").first
    assert first_row.get_attribute("class").split()[0] == "model-budget"

    # django-rq's section still opens its dashboard.
    page.locator("#content-main caption a", has_text="Queues (RQ)").click()
    page.wait_for_load_state()
    assert "/admin/django_rq/" in page.url

    page.goto(f"{live_server.url}/admin/")
    page.click("#cost-report-link a")
    page.wait_for_selector("table#cost-report")
    headers = page.locator("table#cost-report thead th").all_text_contents()
    page.screenshot(path=SCREENSHOTS / "cost-report.png", full_page=True)
    assert headers[0] == "Feature"
    assert "Cost (USD)" in [h.strip() for h in headers]
    assert not [h for h in headers if "_" in h], headers


@pytest.mark.usefixtures("prices")
def test_a_jobs_timeline_reads_whole_at_a_laptops_width(
    page,  # noqa: F811
    live_server,
    fake_provider,
    alice_client,  # noqa: F811
) -> None:
    from tests.conftest import Workers, submit

    fake_provider.http.post("/_fake/faults", json={"next": ["529", "ok"]})
    job = submit(alice_client)
    Workers().drain()
    get_user_model().objects.create_superuser("root", password="pw-staff")
    page.set_viewport_size({"width": WIDE, "height": 900})
    log_in(page, live_server, "root")
    page.goto(f"{live_server.url}/admin/jobs/llmjob/{job.id}/change/")
    page.wait_for_selector("table.llmops-timeline")
    page.locator("table.llmops-timeline").scroll_into_view_if_needed()
    page.screenshot(path=SCREENSHOTS / "job-timeline.png", full_page=True)
    rows = page.locator("table.llmops-timeline tbody tr").all_inner_texts()
    assert len(rows) == 4, rows  # the job, two attempts, the retry's wait
    assert rows[0].startswith("job email-classify")
    assert "error.type=overloaded" in rows[1] and "wait retry" in rows[2]
    assert "provider anthropic" in rows[3] and "$0.0" in rows[3]
    table = page.locator("table.llmops-timeline").bounding_box()
    assert table["x"] >= 0 and table["x"] + table["width"] <= WIDE, table
