"""The live page shows a running job's text as it streams and cancels it mid-call, in headless
Chromium: the web server as ``make run`` has it, the real fake provider streaming at a pace,
and a real llm worker process (the test's own thread only watches).

The page fails on any console error or HTTP error (the ``page`` fixture of the DLQ tests)."""

import time

import pytest

from jobs.models import LlmJob
from ledger.models import CostEntry
from llmops.queues import LLM_QUEUE
from tests.browser.test_dlq_pages import SCREENSHOTS, page  # noqa: F401  (fixture)
from tests.browser.test_live_faults import dev_server  # noqa: F401  (fixture)
from tests.conftest import make_user
from tests.jobs.test_takeover import processes, wait_for, worker_env  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]


def test_the_page_shows_the_text_as_it_streams_and_cancels_the_running_job(
    dev_server,  # noqa: F811
    page,  # noqa: F811  (after the server: it closes first)
    fake_provider,
    processes,  # noqa: F811
):
    # 6,000 tokens at 400 a second: a 15-second stream.
    fake_provider.http.post(
        "/_fake/faults", json={"stream_tokens_per_second": 400}
    ).raise_for_status()
    make_user("lena", password="pw-lena")
    page.goto(f"{dev_server}/live/")
    page.wait_for_url(f"{dev_server}/login/?next=/live/")
    page.fill("#id_username", "lena")
    page.fill("#id_password", "pw-lena")
    page.click("input[type=submit]")
    page.wait_for_url(f"{dev_server}/live/")
    page.wait_for_selector("#socket-state:text('live')")
    page.fill("#prompt", "Write the report. fake_output_tokens=6000")
    page.fill("#max_tokens", "6000")
    page.click("button[type=submit]")
    page.wait_for_selector("#jobs tr")
    job = LlmJob.objects.get()
    row = page.locator(f"#job-{job.id}")

    env = worker_env(fake_provider, LLM_RATE_LIMIT_ENABLED="False", LLM_HEARTBEAT_SECONDS="1")
    processes.start(env, "rqworker", LLM_QUEUE, "--burst")
    row.locator("td.status:text('running')").wait_for(timeout=30_000)
    text = row.locator("td.output .output-text.streaming")
    text.wait_for(timeout=15_000)
    first = len(text.inner_text())
    time.sleep(1.5)
    second = len(text.inner_text())
    assert 0 < first < second, (first, second)  # it grows while the job runs
    page.screenshot(path=SCREENSHOTS / "live-streaming.png")

    assert row.locator("button.live-cancel").is_enabled()
    row.locator("button.live-cancel").click()
    row.locator("td.status:text('cancelled')").wait_for(timeout=5_000)
    job.refresh_from_db()
    assert job.status == "cancelled" and job.stop_reason == "cancelled"
    # The page keeps what streamed: the job's partial output, as the database has it.
    wait_for(
        lambda: row.locator("td.output .output-text").inner_text() == job.output_text,
        timeout=5,
        what="the page to show the cancelled job's output",
    )
    assert "cancelled mid-call" in row.locator("td.output").inner_text()
    assert len(job.output_text or "") < 6000 * 4
    assert CostEntry.objects.get(job=job).outcome == "cancelled"
    page.screenshot(path=SCREENSHOTS / "live-cancelled-mid-call.png")
