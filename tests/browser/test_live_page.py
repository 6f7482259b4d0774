"""The live page as a user sees it: headless Chromium against a real ASGI server (uvicorn, HTTP
and WebSocket on one port), jobs run by real RQ workers in the test process; no reload.

live_server is WSGI and has no WebSocket, so the server is a uvicorn subprocess on the test
database. Fails on any console error or HTTP error (the ``page`` fixture of the DLQ tests)."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from jobs.models import LlmJob
from tests.browser.test_dlq_pages import SCREENSHOTS, page  # noqa: F401  (fixture)
from tests.conftest import ROOT, _free_port, make_user

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]


@pytest.fixture
def asgi_server() -> Iterator[str]:
    db = connection.settings_dict
    if not db["ENGINE"].endswith("mysql"):
        pytest.skip("the server subprocess needs a database server, not an in-memory SQLite")
    env = dict(os.environ)
    env["DATABASE_URL"] = (
        f"mysql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    )
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "llmops.asgi:application", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"uvicorn exited: {server.stderr.read()!r}")  # type: ignore[union-attr]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=10)


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
