"""The live page as a user sees it: headless Chromium against a real ASGI server (uvicorn, HTTP
and WebSocket on one port), jobs run by real RQ workers in the test process; no reload.

live_server is WSGI and has no WebSocket, so the server is a uvicorn subprocess on the test
database. Fails on any console error or HTTP error (the ``page`` fixture of the DLQ tests)."""

import glob
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from jobs.models import LlmJob
from tests.browser.test_dlq_pages import SCREENSHOTS, page  # noqa: F401  (fixture)
from tests.conftest import make_user

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]


def test_a_user_submits_and_sees_completed_without_reloading(
    asgi_server,
    page,  # noqa: F811  (after the server: it closes first, before the page could reconnect)
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


def _server_side_holders(port: int) -> set[int]:
    """Processes holding an established TCP connection on the server's side of ``port``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                inodes.add(fields[9])
    holders = set()
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            holders.add(int(fd.split("/")[2]))
    return holders


def test_the_page_reconnects_and_catches_up_when_the_server_closes_its_socket(
    asgi_server,
    page,  # noqa: F811  (after the server: it closes first, before the page could reconnect)
    workers,
    settings,
):
    """The job completes while no event can reach the page, then the server process holding
    its socket shuts down (1012): the page reconnects to the other process and asks the API
    for the jobs it shows, so the row reads ``completed`` without a reload."""
    make_user("lena", password="pw-lena")
    page.goto(f"{asgi_server}/live/")
    page.fill("#id_username", "lena")
    page.fill("#id_password", "pw-lena")
    page.click("input[type=submit]")
    page.wait_for_url(f"{asgi_server}/live/")
    page.wait_for_selector("#socket-state:text('live')")
    page.evaluate("window.__no_reload = true")
    page.fill("#prompt", "Classify: please refund my order")
    page.click("button[type=submit]")
    page.wait_for_selector("#jobs tr td.status:text('queued')")
    job = LlmJob.objects.get()

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: the workers' events go nowhere
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [f"redis://127.0.0.1:{closed.getsockname()[1]}/0"]},
            }
        }
        workers.drain()
    job.refresh_from_db()
    assert job.status == "completed"
    row = page.locator(f"#job-{job.id}")
    assert row.locator("td.status").inner_text() == "queued"

    # uvicorn closes idle HTTP connections after 5 s: then only the socket is left.
    port = int(asgi_server.rsplit(":", 1)[1])
    deadline = time.monotonic() + 20
    while len(holders := _server_side_holders(port)) != 1:
        assert time.monotonic() < deadline, holders
        time.sleep(0.2)
    killed = holders.pop()
    os.kill(killed, signal.SIGTERM)

    row.locator("td.status:text('completed')").wait_for(timeout=15_000)
    page.wait_for_selector("#socket-state:text('live')")
    assert page.evaluate("window.__no_reload") is True
    assert job.output_text and job.output_text in row.locator("td.output").inner_text()
    # A reconnect that reached the process as it shut down is reset, and Chromium reports that
    # on the console whatever the page does: expected here, once that process is gone and the
    # page is live again on another.
    deadline = time.monotonic() + 30
    while Path(f"/proc/{killed}").exists() or killed in _server_side_holders(port):
        assert time.monotonic() < deadline, f"worker {killed} still there"
        time.sleep(0.2)
    page.wait_for_selector("#socket-state:text('live')")
    page.problems[:] = [p for p in page.problems if "WebSocket connection to" not in p]
