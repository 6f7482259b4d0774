"""The ops dashboard as an operator sees it: headless Chromium against the ASGI app in uvicorn
(DEBUG off, static files served as in production), with seeded rows and real Redis.

Fails on any console error or HTTP error (the ``page`` fixture of the DLQ tests)."""

import os
import socket
from datetime import timedelta
from decimal import Decimal

import django_rq
import pytest
from django.utils import timezone
from rq import Worker

from dlq.models import FailureRecord
from jobs.models import ProviderBreaker
from ledger.models import Budget, CostEntry
from llmops.queues import DEFAULT_QUEUE, LLM_QUEUE
from tests.browser.test_dlq_pages import SCREENSHOTS, page  # noqa: F401  (fixture)
from tests.conftest import make_user
from tests.ops.test_dashboard import dead_letter, ledger_row, make_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

CANVASES = ["throughput", "failures", "timings", "severity", "cost", "budgets"]

CHARTS_STATE = """(ids) => ids.map((name) => {
    const canvas = document.getElementById("chart-" + name);
    const chart = Chart.getChart(canvas);
    const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    let drawn = 0;
    for (let i = 3; i < pixels.length; i += 4) {
        if (pixels[i] !== 0) drawn += 1;
    }
    return {
        name: name,
        chart: Boolean(chart),
        width: canvas.width,
        height: canvas.height,
        drawn: drawn,
        sums: chart ? chart.data.datasets.map((d) => d.data.reduce((a, b) => a + (b || 0), 0)) : [],
    };
})"""


def seed() -> dict[str, int]:
    """An hour of traffic, two weeks of cost, dead letters, budgets, a breaker, Redis state."""
    owner = make_user("owen")
    now = timezone.now()
    attempts = failed = 0
    for minute in range(1, 58, 3):
        for n, feature in enumerate(["summarize", "classify", "extract"]):
            enqueued = now - timedelta(minutes=minute, seconds=40)
            started = enqueued + timedelta(seconds=0.2 + n + minute % 5)
            job = make_job(
                owner,
                feature=feature,
                enqueued_at=enqueued,
                started_at=started,
                completed_at=started + timedelta(seconds=2 + 3 * n),
            )
            outcome = "error_response" if (minute + n) % 4 == 0 else "success"
            ledger_row(job, started + timedelta(seconds=1), outcome=outcome, cost="0.020000")
            attempts += 1
            failed += outcome != "success"
    history = make_job(owner, feature="summarize")
    for day in range(1, 14):
        for n, feature in enumerate(["summarize", "classify", "extract"]):
            ledger_row(
                history,
                now - timedelta(days=day),
                cost=f"{(n + 1) * day / 10:.6f}",
                feature=feature,
            )
    for minutes, severity in [(4, "CRITICAL"), (12, "ERROR"), (25, "ERROR"), (50, "WARNING")]:
        dead_letter(
            make_job(owner, feature="classify", status="failed"),
            now - timedelta(minutes=minutes),
            severity,
        )
    Budget.objects.create(
        scope="feature", feature="classify", period="day", limit_usd=Decimal("0.50")
    )
    Budget.objects.create(
        scope="feature", feature="summarize", period="month", limit_usd=Decimal("40")
    )
    ProviderBreaker.objects.create(provider="anthropic")
    queue = django_rq.get_queue(DEFAULT_QUEUE)
    queue.enqueue("time.sleep", 0)
    Worker(
        [django_rq.get_queue(LLM_QUEUE)], connection=queue.connection, name="llm-1"
    ).register_birth()
    return {"attempts": attempts, "failed": failed}  # fmt: skip


def test_the_dashboard_draws_every_chart_and_refreshes_in_place(
    page,  # noqa: F811
    asgi_server,
):
    seeded = seed()
    make_user("olga", is_staff=True, password="pw-staff")
    page.goto(f"{asgi_server}/admin/ops/dashboard/?hours=1")
    page.wait_for_url(f"{asgi_server}/admin/login/?next=/admin/ops/dashboard/%3Fhours%3D1")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "pw-staff")
    page.click("input[type=submit]")
    page.wait_for_url(f"{asgi_server}/admin/ops/dashboard/?hours=1")
    page.wait_for_selector("#ops-dashboard[data-refreshes='1']")
    page.evaluate("window.__no_reload = true")

    charts = {c["name"]: c for c in page.evaluate(CHARTS_STATE, CANVASES)}
    for name in CANVASES:
        chart = charts[name]
        assert chart["chart"], f"no Chart.js chart on chart-{name}"
        assert chart["width"] > 0 and chart["height"] > 0, chart
        assert chart["drawn"] > 2000, f"chart-{name} is nearly blank: {chart}"
    # What the charts hold is what was seeded.
    assert charts["throughput"]["sums"] == [seeded["attempts"], seeded["attempts"]]
    assert charts["failures"]["sums"] == [seeded["failed"], 4]
    assert charts["severity"]["sums"] == [4, 4]
    assert len(charts["budgets"]["sums"]) == 1
    assert page.locator("#summary-attempts").inner_text() == str(seeded["attempts"])
    assert page.locator("#summary-breaker").inner_text() == "closed"
    assert page.locator("#workers-table tbody tr").count() == 1
    assert "llm-1" in page.locator("#workers-table").inner_text()
    assert page.locator("#queues-table tbody tr").count() == 4  # llm, default, alerts, agents
    assert page.locator("#budgets-table tbody tr").count() == 2
    assert page.locator("#failures-table tbody tr").count() == 4
    assert page.locator("#queues-unavailable").is_hidden()
    page.screenshot(path=SCREENSHOTS / "ops-dashboard.png", full_page=True)

    # A job dead-lettered now shows up at the next poll (every 10 s), without a reload.
    record = FailureRecord.objects.create(
        job=make_job(make_user("late"), feature="late-feature", status="failed"),
        severity="CRITICAL",
        reason_code="spend_cap",
        attempts=1,
        request_snapshot={},
    )
    page.wait_for_selector("#failures-table >> text=spend_cap", timeout=15_000)
    assert page.evaluate("window.__no_reload") is True
    first_row = page.locator("#failures-table tbody tr").first
    assert first_row.locator("a").first.get_attribute("href") == (
        f"/admin/dlq/failurerecord/{record.id}/change/"
    )
    assert int(page.locator("#ops-dashboard").get_attribute("data-refreshes") or 0) >= 2

    # Another window redraws the per-minute charts over 24 hours.
    page.select_option("#ops-window", "24")
    page.wait_for_function(
        "Chart.getChart(document.getElementById('chart-throughput')).data.labels.length === 1440"
    )
    assert page.url.endswith("/admin/ops/dashboard/?hours=24")
    assert CostEntry.objects.count() > 0


FIRST_DRAWN = """() => {
    const data = Chart.getChart(document.getElementById("chart-throughput")).data.datasets[0].data;
    return [data.findIndex((n) => n > 0), data.length];
}"""


def test_a_fresh_install_opens_on_a_window_its_data_fills_and_names_workers_by_host(
    page,  # noqa: F811
    asgi_server,
):
    # Forty minutes of first jobs: in six hours they would be a spike in the last ninth.
    owner = make_user("owen")
    now = timezone.now()
    for minute in range(2, 42, 4):
        ledger_row(make_job(owner, feature="first-steps"), now - timedelta(minutes=minute))
    queue = django_rq.get_queue(LLM_QUEUE)
    unnamed = Worker([queue], connection=queue.connection)  # rq names it uuid4().hex
    unnamed.register_birth()
    make_user("olga", is_staff=True, password="pw-staff")
    page.goto(f"{asgi_server}/admin/login/?next=/admin/ops/dashboard/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "pw-staff")
    page.click("input[type=submit]")
    page.wait_for_url(f"{asgi_server}/admin/ops/dashboard/")
    page.wait_for_selector("#ops-dashboard[data-refreshes='1']")

    assert page.locator("#ops-window").input_value() == "1"
    first, length = page.evaluate(FIRST_DRAWN)
    assert length == 60
    assert 0 <= first <= length // 2, f"the data starts at minute {first} of {length}"
    assert page.locator("#summary-attempts").inner_text() == "10"

    workers = page.locator("#workers-table tbody").inner_text()
    assert f"{socket.gethostname()}, pid {os.getpid()}" in workers
    assert unnamed.name not in workers
    page.screenshot(path=SCREENSHOTS / "ops-dashboard-1400.png", full_page=True)

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    page.wait_for_selector("#ops-dashboard[data-refreshes='1']")
    page.screenshot(path=SCREENSHOTS / "ops-dashboard-390.png", full_page=True)
    scroll_width, viewport = page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert scroll_width <= viewport, f"the page scrolls sideways: {scroll_width} > {viewport}"
