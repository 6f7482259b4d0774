"""The live page as a user sees it: headless Chromium against a real ASGI server (uvicorn, HTTP
and WebSocket on one port), jobs run by real RQ workers in the test process; no reload.

live_server is WSGI and has no WebSocket, so the server is a uvicorn subprocess on the test
database. Fails on any console error or HTTP error (the ``page`` fixture of the DLQ tests)."""

import pytest

from jobs.models import LlmJob
from tests.browser.test_dlq_pages import SCREENSHOTS, page  # noqa: F401  (fixture)
from tests.conftest import make_user

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]


def test_a_user_submits_and_sees_completed_without_reloading(
    page,  # noqa: F811
    asgi_server,
    workers,
):
    make_user("lena", password="pw-lena")
    page.goto(f"{asgi_server}/live/")
    page.wait_for_url(f"{asgi_server}/login/?next=/live/")
    page.fill("#id_username", "lena")
    page.fill("#id_password", "pw-lena")
    page.click("input[type=submit]")
    page.wait_for_url(f"{asgi_server}/live/")
    page.wait_for_selector("#socket-state:text('live')")
    # A marker that a reload would lose: the page must update in place.
    page.evaluate("window.__no_reload = true")

    page.select_option("#model", "claude-sonnet-4-6")
    page.fill("#prompt", "Classify: please refund my order")
    page.fill("#max_tokens", "64")
    page.click("button[type=submit]")
    page.wait_for_selector("#jobs tr")
    job = LlmJob.objects.get()
    assert job.user.username == "lena" and job.max_tokens == 64

    workers.drain()
    row = page.locator(f"#job-{job.id}")
    row.locator("td.status:text('completed')").wait_for(timeout=10_000)
    assert page.evaluate("window.__no_reload") is True
    job.refresh_from_db()
    assert job.output_text and job.output_text in row.locator("td.output").inner_text()
    assert row.locator("td").nth(2).inner_text() == "1"
    page.screenshot(path=SCREENSHOTS / "live-page.png", full_page=True)
