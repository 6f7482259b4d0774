"""The live page of agent runs as a user sees it: headless Chromium against a real ASGI server,
the run's turns and tool calls run by real RQ workers in the test process; the user starts the
demo run, approves its e-mail and sees it complete, without reloading."""

import pytest

from agents.models import AgentRun, DemoEmail
from tests.agents.conftest import AgentWorkers
from tests.browser.test_dlq_pages import SCREENSHOTS, page  # noqa: F401  (fixture)
from tests.conftest import make_user

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]


def test_a_user_starts_the_demo_run_approves_its_email_and_sees_it_complete(
    asgi_server,
    page,  # noqa: F811
    fake_provider,
):
    workers = AgentWorkers()
    make_user("ada", password="pw-ada")
    page.goto(f"{asgi_server}/live/agents/")
    page.wait_for_url(f"{asgi_server}/login/?next=/live/agents/")
    page.fill("#id_username", "ada")
    page.fill("#id_password", "pw-ada")
    page.click("input[type=submit]")
    page.wait_for_url(f"{asgi_server}/live/agents/")
    page.wait_for_selector("#socket-state:text('live')")
    page.evaluate("window.__no_reload = true")

    page.click("#run-form button[type=submit]")  # the demo prompt and every tool, as shown
    page.wait_for_selector(".agent-run")
    run = AgentRun.objects.get()
    assert run.user.username == "ada" and "send_email" in run.tools

    workers.drain()
    box = page.locator(f"#run-{run.id}")
    box.locator("[data-status='waiting_approval']").wait_for(timeout=10_000)
    assert box.locator("tr.step").count() == 5  # turn, clock, calculator, turn, send_email
    box.locator("button:text('Approve')").click()
    box.locator("[data-status='running']").wait_for(timeout=10_000)
    workers.drain()
    box.locator("[data-status='completed']").wait_for(timeout=10_000)
    assert page.evaluate("window.__no_reload") is True
    assert "6*7 = 42" in box.locator(".agent-output").inner_text()
    assert DemoEmail.objects.get().to == "team@example.com"
    page.screenshot(path=SCREENSHOTS / "live-agents.png", full_page=True)
