"""Both live pages at a laptop's 1,400 px and a phone's 390 px: no sideways scroll, the same
form with the same padding, and on the agent page a step's output readable on a phone; after a
reload the agent runs come newest first with those waiting for approval on top, and keep that
order as runs start, wait and finish.

Headless Chromium against the web server as the Procfile starts it (``asgi_server``); the runs'
turns and tool calls are run by real RQ workers in the test process. Each test fails on any
console error or HTTP error (the ``page`` fixture of the DLQ tests)."""

import json

import pytest

from agents.models import AgentRun
from tests.agents.conftest import AgentWorkers, call, script, start_run
from tests.browser.test_dlq_pages import SCREENSHOTS, page  # noqa: F401  (fixture)
from tests.browser.test_live_page_layout import BOX, no_horizontal_scroll
from tests.conftest import _client_for, make_user

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]

WIDE, NARROW = 1400, 390
LONG_WORD = "y" * 300
DEMO_TOOLS = ["clock", "calculator", "send_email"]

FORM_PADDING = """() => {
    const form = document.querySelector(".live-form form");
    const style = getComputedStyle(form);
    return [style.paddingTop, style.paddingRight, style.paddingBottom, style.paddingLeft];
}"""

RUN_ORDER = "() => Array.from(document.querySelectorAll('#runs .agent-run')).map((b) => b.id)"


def sign_in(page, server: str, path: str, username: str) -> None:  # noqa: F811
    page.goto(f"{server}{path}")
    page.wait_for_url(f"{server}/login/?next={path}")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-" + username)
    page.click("input[type=submit]")
    page.wait_for_url(f"{server}{path}")
    page.wait_for_selector("#socket-state:text('live')")


def run_body(*turns, tools=DEMO_TOOLS) -> dict:  # type: ignore[no-untyped-def]
    return {
        "feature": "live-agent",
        "model": "claude-sonnet-4-6",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": script(*turns)}],
        "tools": list(tools),
    }


def waiting_body() -> dict:
    """Two tools at once, then an e-mail (with a long word in it) that waits for approval."""
    return run_body(
        [call("clock", timezone="Asia/Tokyo"), call("calculator", expression="6*7")],
        [call("send_email", to="team@example.com", subject="Answer", body=LONG_WORD)],
        "Done: 42, and the team was told.",
    )


@pytest.fixture
def agent_workers(fake_provider) -> AgentWorkers:  # type: ignore[no-untyped-def]
    return AgentWorkers()


@pytest.fixture
def runs(agent_workers):  # type: ignore[no-untyped-def]
    """Five runs of one user, started in this order: done, waiting for approval, done, waiting,
    done. The two waiting are not the oldest, so newest first alone does not put them on top."""
    user = make_user("ada", password="pw-ada")
    client = _client_for(user)
    started = {}
    for name in ("done_a", "waiting_a", "done_b", "waiting_b", "done_c"):
        body = waiting_body() if name.startswith("waiting") else run_body(f"The {name} answer.")
        started[name] = start_run(client, body)
    agent_workers.drain()
    for name, run in started.items():
        run.refresh_from_db()
        assert run.status == ("waiting_approval" if name.startswith("waiting") else "completed")
    return {**started, "client": client}


def box_id(run: AgentRun) -> str:
    return f"run-{run.id}"


def test_both_live_pages_fit_a_laptop_and_a_phone_with_the_same_form(
    asgi_server,
    page,  # noqa: F811
    runs,
):
    make_user("ada-jobs", password="pw-ada-jobs")
    sign_in(page, asgi_server, "/live/", "ada-jobs")
    jobs_padding = page.evaluate(FORM_PADDING)
    assert all(p != "0px" for p in jobs_padding), jobs_padding
    assert no_horizontal_scroll(page)
    page.set_viewport_size({"width": NARROW, "height": 844})
    page.reload()
    page.wait_for_selector("#socket-state:text('live')")
    assert page.evaluate(FORM_PADDING) == jobs_padding
    assert no_horizontal_scroll(page)
    page.context.clear_cookies()

    page.set_viewport_size({"width": WIDE, "height": 1000})
    sign_in(page, asgi_server, "/live/agents/", "ada")
    waiting = f"#{box_id(runs['waiting_b'])}"
    step_text = f"{waiting} tr.step-waiting_approval td:nth-child(4)"
    page.wait_for_selector(step_text)
    page.screenshot(path=SCREENSHOTS / "live-agents-1400.png", full_page=True)
    # The same form as /live/: its padding, its submit button's size.
    assert page.evaluate(FORM_PADDING) == jobs_padding
    assert no_horizontal_scroll(page)
    # Side by side: the runs beside the form, the step output given most of the list's width.
    form, listing = page.evaluate(BOX, ".live-form"), page.evaluate(BOX, ".live-jobs")
    assert listing["left"] >= form["right"] and listing["top"] < form["bottom"]
    wide_text = page.evaluate(BOX, step_text)
    assert wide_text["width"] >= listing["width"] / 2, (wide_text, listing)

    page.set_viewport_size({"width": NARROW, "height": 844})
    page.reload()
    page.wait_for_selector(step_text)
    page.screenshot(path=SCREENSHOTS / "live-agents-390.png", full_page=True)
    assert no_horizontal_scroll(page)
    assert page.evaluate(FORM_PADDING) == jobs_padding
    # A phone: the step's output is a readable column (not four characters wide), its long
    # word wrapped inside the screen, and its Approve button on screen.
    page.locator(step_text).scroll_into_view_if_needed()
    narrow_text = page.evaluate(BOX, step_text)
    assert narrow_text["width"] >= 200, narrow_text
    assert narrow_text["left"] >= 0 and narrow_text["right"] <= NARROW + 0.5, narrow_text
    approve = page.locator(f"{waiting} button:text('Approve')")
    approve.scroll_into_view_if_needed()
    button = approve.bounding_box()
    assert button["x"] >= 0 and button["x"] + button["width"] <= NARROW + 0.5, button
    for selector in ("#run-form", "#prompt", "#max_turns", "#run-form button[type=submit]"):
        page.locator(selector).scroll_into_view_if_needed()
        box = page.evaluate(BOX, selector)
        assert box["left"] >= 0 and box["right"] <= NARROW + 0.5, (selector, box)


def test_runs_come_newest_first_with_those_waiting_for_approval_on_top(
    asgi_server,
    page,  # noqa: F811
    runs,
    agent_workers,
):
    ids = {name: box_id(run) for name, run in runs.items() if name != "client"}
    order = [ids[name] for name in ("waiting_b", "waiting_a", "done_c", "done_b", "done_a")]
    sign_in(page, asgi_server, "/live/agents/", "ada")
    for _ in range(3):  # the same after each reload, whichever answer arrives first
        page.wait_for_function("document.querySelectorAll('#runs .agent-run').length === 5")
        for name, selector in ids.items():
            status = "waiting_approval" if name.startswith("waiting") else "completed"
            page.wait_for_selector(f"#{selector} [data-status='{status}']")
        assert page.evaluate(RUN_ORDER) == order
        page.reload()

    # A run started now goes under the ones waiting, above the older ones.
    page.fill("#prompt", "Say hello. fake_tool_script=" + json.dumps(["Hello."]))
    page.click("#run-form button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#runs .agent-run').length === 6")
    started = box_id(AgentRun.objects.order_by("-created_at").first())
    assert started not in order
    assert page.evaluate(RUN_ORDER) == [*order[:2], started, *order[2:]]

    # Approved, a run leaves the top for its place by age, live.
    page.locator(f"#{ids['waiting_a']} button:text('Approve')").click()
    page.wait_for_selector(f"#{ids['waiting_a']} [data-status='running']", timeout=10_000)
    agent_workers.drain()
    page.wait_for_selector(f"#{ids['waiting_a']} [data-status='completed']", timeout=10_000)
    page.wait_for_selector(f"#{started} [data-status='completed']", timeout=10_000)
    assert page.evaluate(RUN_ORDER) == [
        ids["waiting_b"],
        started,
        ids["done_c"],
        ids["done_b"],
        ids["waiting_a"],
        ids["done_a"],
    ]

    # And a run that comes to wait later moves to the top when it does.
    later = start_run(runs["client"], waiting_body())
    agent_workers.drain()
    page.wait_for_selector(f"#{box_id(later)} [data-status='waiting_approval']", timeout=10_000)
    assert page.evaluate(RUN_ORDER)[:2] == [box_id(later), ids["waiting_b"]]
