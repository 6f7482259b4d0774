"""The live page as a team would show it, at a laptop's 1,400 px and a phone's 390 px: the admin's
look, the form and the job list in view, each job linked to its API detail and admin page,
filters by status and feature, output wrapped with its newlines kept; and the sign-in page.

Headless Chromium against the web server as the Procfile starts it (``asgi_server``), jobs run by
real RQ workers in the test process; each test fails on any console error or HTTP error (the
``page`` fixture of the DLQ tests). Screenshots go to ``SCREENSHOT_DIR``."""

import pytest

from jobs.models import LlmJob
from tests.browser.test_dlq_pages import SCREENSHOTS, page  # noqa: F401  (fixture)
from tests.conftest import _client_for, make_user, submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]

WIDE, NARROW = 1400, 390
LONG_WORD = "x" * 300
OUTPUT = "First line of the answer.\nSecond line, after a newline.\n" + LONG_WORD

BOX = """(selector) => {
    const node = document.querySelector(selector);
    if (!node) return null;
    const box = node.getBoundingClientRect();
    return {left: box.left, right: box.right, top: box.top, bottom: box.bottom,
            width: box.width, height: box.height,
            innerWidth: window.innerWidth, innerHeight: window.innerHeight};
}"""


def sign_in(page, server: str, username: str) -> None:  # noqa: F811
    page.goto(f"{server}/live/")
    page.wait_for_url(f"{server}/login/?next=/live/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-" + username)
    page.click("input[type=submit]")
    page.wait_for_url(f"{server}/live/")
    page.wait_for_selector("#socket-state:text('live')")


def assert_in_viewport(page, selector: str, *, scroll: bool = False) -> None:  # noqa: F811
    """Whole and on screen (after scrolling it into view when asked): nothing cut off."""
    if scroll:
        page.locator(selector).scroll_into_view_if_needed()
    box = page.evaluate(BOX, selector)
    assert box is not None, f"{selector} not found"
    assert box["width"] > 0 and box["height"] > 0, (selector, box)
    assert box["left"] >= 0 and box["right"] <= box["innerWidth"] + 0.5, (selector, box)
    assert box["top"] >= 0 and box["top"] < box["innerHeight"], (selector, box)


def no_horizontal_scroll(page) -> bool:  # noqa: F811
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


@pytest.fixture
def jobs(workers):
    """Three jobs of one user: two completed (one with a long multi-line output), one failed."""
    lena = make_user("lena", "view_llmjob", is_staff=True, password="pw-lena")
    client = _client_for(lena)
    done = submit(client, feature="email-classify")
    other = submit(client, feature="ticket-summary")
    workers.drain()
    LlmJob.objects.filter(id=done.id).update(output_text=OUTPUT)
    return {"done": done, "other": other, "client": client}


def test_the_page_looks_like_the_admin_and_fits_a_laptop_and_a_phone(
    asgi_server,
    page,  # noqa: F811
    jobs,
):
    sign_in(page, asgi_server, "lena")
    row = f"#job-{jobs['done'].id}"
    page.wait_for_selector(f"{row} td.status:text('completed')")
    # The admin's header bar and colours (its CSS variables), not a bare page.
    assert page.locator("#header #branding").is_visible()
    header_bg = page.evaluate("getComputedStyle(document.getElementById('header')).backgroundColor")
    assert header_bg not in ("rgba(0, 0, 0, 0)", "transparent")
    assert (
        page.locator(".module h2#jobs-title").evaluate("(h) => getComputedStyle(h).backgroundColor")
        == header_bg
    )

    # The output: newlines kept, long words wrapped inside its cell.
    output = page.locator(f"{row} td.output")
    assert "First line of the answer.\nSecond line" in output.inner_text()
    assert output.locator(".output-text").evaluate("(o) => getComputedStyle(o).whiteSpace") == (
        "pre-wrap"
    )

    page.screenshot(path=SCREENSHOTS / "live-page-1400.png")
    for selector in ("#submit-form", "#prompt", f"{row} td.status", f"{row} td.output"):
        assert_in_viewport(page, selector)
    assert no_horizontal_scroll(page)
    # Side by side: the list starts beside the form, not under it.
    form, table = page.evaluate(BOX, "#submit-form"), page.evaluate(BOX, "#job-table")
    assert table["left"] >= form["right"] and table["top"] < form["bottom"]

    page.set_viewport_size({"width": NARROW, "height": 844})
    page.reload()
    page.wait_for_selector(f"{row} td.status:text('completed')")
    page.screenshot(path=SCREENSHOTS / "live-page-390.png", full_page=True)
    assert no_horizontal_scroll(page)
    for selector in ("#submit-form", "#prompt", "#max_tokens"):
        assert_in_viewport(page, selector, scroll=True)
    for selector in (f"{row} td.status", f"{row} td.attempts", f"{row} td.output"):
        assert_in_viewport(page, selector, scroll=True)
    # Stacked: the list under the form, a card per job (no table header to scroll along).
    form, table = page.evaluate(BOX, "#submit-form"), page.evaluate(BOX, "#job-table")
    assert table["top"] >= form["bottom"]
    assert not page.locator("#job-table thead").is_visible()
    assert page.locator(f"{row} td.attempts").inner_text() == "1"


def test_each_job_links_to_its_api_detail_and_its_admin_page(
    asgi_server,
    page,  # noqa: F811
    jobs,
):
    job = jobs["done"]
    sign_in(page, asgi_server, "lena")
    row = page.locator(f"#job-{job.id}")
    link = row.locator("a.job-id")
    assert link.inner_text() == str(job.id)  # the whole id, not 8 characters of it
    assert link.get_attribute("href") == f"/api/v1/jobs/{job.id}/"
    admin = row.locator("a.job-admin")
    assert admin.get_attribute("href") == f"/admin/jobs/llmjob/{job.id}/change/"

    # The API answers the page's session (fetched, not opened: a JSON tab asks for a favicon).
    detail = page.request.get(asgi_server + link.get_attribute("href"))
    assert detail.status == 200 and detail.json()["id"] == str(job.id)
    admin.click()
    page.wait_for_url(f"{asgi_server}/admin/jobs/llmjob/{job.id}/change/")
    assert str(job.id) in page.content()


def test_filters_hide_other_statuses_and_features(
    asgi_server,
    page,  # noqa: F811
    jobs,
    fake_provider,
    workers,
):
    fake_provider.faults({"400": 1.0})
    failed = submit(jobs["client"], feature="email-classify")
    workers.drain()
    fake_provider.reset()
    assert LlmJob.objects.get(id=failed.id).status == "failed"
    done, other = jobs["done"].id, jobs["other"].id

    sign_in(page, asgi_server, "lena")
    page.wait_for_selector(f"#job-{failed.id} td.status:text('failed')")
    visible = lambda: {  # noqa: E731
        tr.get_attribute("id") for tr in page.locator("#jobs tr").all() if tr.is_visible()
    }
    assert visible() == {f"job-{done}", f"job-{other}", f"job-{failed.id}"}

    page.select_option("#filter-status", "failed")
    assert visible() == {f"job-{failed.id}"}
    assert page.locator("#filter-count").inner_text() == "1 of 3 jobs shown"
    page.select_option("#filter-status", "completed")
    assert visible() == {f"job-{done}", f"job-{other}"}
    page.select_option("#filter-feature", "ticket-summary")
    assert visible() == {f"job-{other}"}
    page.select_option("#filter-status", "")
    page.select_option("#filter-feature", "email-classify")
    assert visible() == {f"job-{done}", f"job-{failed.id}"}
    # A failed job says where it went, and links to its dead letter for staff.
    dlq = page.locator(f"#job-{failed.id} a.job-dlq")
    assert dlq.get_attribute("href") == f"/admin/dlq/failurerecord/?q={failed.id}"

    # A job submitted now shows up live, under the filters too: another feature stays hidden.
    page.fill("#feature", "ticket-summary")
    page.fill("#prompt", "Summarise: order late")
    page.click("button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#jobs tr').length === 4")
    assert visible() == {f"job-{done}", f"job-{failed.id}"}


def test_the_sign_in_page_looks_like_the_admins_without_a_demo_hint_in_production(
    asgi_server,
    page,  # noqa: F811
):
    page.goto(f"{asgi_server}/live/")
    page.wait_for_url(f"{asgi_server}/login/?next=/live/")
    assert page.locator("body.login #header #branding").is_visible()
    assert page.locator("#login-form input[type=submit]").is_visible()
    assert page.title() == "Sign in | llmops"
    assert page.locator("#demo-login-hint").count() == 0  # DEBUG is off
    page.screenshot(path=SCREENSHOTS / "login-page.png")
    page.set_viewport_size({"width": NARROW, "height": 844})
    assert no_horizontal_scroll(page)
    make_user("lena", password="pw-lena")
    page.fill("#id_username", "lena")
    page.fill("#id_password", "wrong")
    page.click("input[type=submit]")
    page.wait_for_selector(".errornote")
    assert page.url.endswith("/login/?next=/live/")
