"""The live page's fault picker end to end, as a newcomer uses it under ``make run``: the web
server in development (DEBUG on) against the real fake provider process, jobs run by real RQ
workers in the test process. A picked fault is scripted for that job alone
(jobs/live_faults.py, fake_provider/scripts.py): 429 then success, a 400 dead letter that a
requeue then completes, and a slow overloaded call whose job is cancelled from the page.

Each test fails on any console error or HTTP error (the ``page`` fixture of the DLQ tests)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from dlq.models import FailureRecord
from dlq.services import failure_requeue
from jobs.models import LlmJob
from tests.browser.test_dlq_pages import SCREENSHOTS, page  # noqa: F401  (fixture)
from tests.conftest import FakeProvider, make_user, web_server

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("prices", "no_breaker"),
]


@pytest.fixture
def dev_server(
    transactional_db: None, fake_provider: FakeProvider, monkeypatch, tmp_path: Path
) -> Iterator[str]:
    """The web server as ``make run`` has it: DEBUG on, the provider the fake one."""
    monkeypatch.setenv("DJANGO_DEBUG", "true")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_provider.url)
    with web_server(workers=1, log=tmp_path / "asgi_server.log") as url:
        yield url


def sign_in_and_pick(page, server: str, fault: str) -> None:  # noqa: F811
    make_user("lena", password="pw-lena")
    page.goto(f"{server}/live/")
    page.wait_for_url(f"{server}/login/?next=/live/")
    # In development the sign-in page says which login make run created.
    assert "demo" in page.locator("#demo-login-hint").inner_text()
    page.screenshot(path=SCREENSHOTS / "login-page-development.png")
    page.fill("#id_username", "lena")
    page.fill("#id_password", "pw-lena")
    page.click("input[type=submit]")
    page.wait_for_url(f"{server}/live/")
    page.wait_for_selector("#socket-state:text('live')")
    page.select_option("#fault", fault)
    page.fill("#prompt", "Classify: please refund my order")
    page.click("button[type=submit]")
    page.wait_for_selector("#jobs tr")


def test_429_then_success_completes_with_two_attempts(
    dev_server,
    page,  # noqa: F811  (after the server: it closes first)
    workers,
    fake_provider,
):
    sign_in_and_pick(page, dev_server, "429")
    job = LlmJob.objects.get()
    row = page.locator(f"#job-{job.id}")
    # The socket's event may draw the row before the POST answer names its fault: wait for it.
    row.locator(".job-meta", has_text="fault: 429, then success").wait_for(timeout=10_000)

    workers.drain()
    row.locator("td.status:text('completed')").wait_for(timeout=15_000)
    assert row.locator("td").nth(2).inner_text() == "2"
    # Events carry only what changed: the row still says what the job is.
    assert f"live-page \u00b7 {job.model}" in row.locator(".job-meta").inner_text()
    assert fake_provider.stats()["by_status"] == {"200": 1, "429": 1}
    page.screenshot(path=SCREENSHOTS / "live-fault-429.png")


def test_400_dead_letters_and_a_requeue_then_completes(
    dev_server,
    page,  # noqa: F811
    workers,
    fake_provider,
):
    sign_in_and_pick(page, dev_server, "400")
    job = LlmJob.objects.get()
    row = page.locator(f"#job-{job.id}")

    workers.drain()
    row.locator("td.status:text('failed')").wait_for(timeout=15_000)
    assert "invalid_request" in row.locator("td.output").inner_text()
    record = FailureRecord.objects.get(job=job)
    assert record.state == FailureRecord.State.OPEN
    page.screenshot(path=SCREENSHOTS / "live-fault-400.png")

    # The fault was one-shot: the requeued job's call is answered.
    assert failure_requeue(record=record) is True
    workers.drain()
    row.locator("td.status:text('completed')").wait_for(timeout=15_000)
    job.refresh_from_db()
    assert job.output_text and job.output_text in row.locator("td.output").inner_text()
    assert row.locator("td").nth(2).inner_text() == str(job.attempts) == "2"
    assert fake_provider.stats()["by_status"] == {"200": 1, "400": 1}


def test_a_slow_overloaded_job_is_cancelled_from_the_page(
    dev_server,
    page,  # noqa: F811
    workers,
    fake_provider,
):
    sign_in_and_pick(page, dev_server, "slow")
    job = LlmJob.objects.get()
    row = page.locator(f"#job-{job.id}")
    # Queued and waiting: the button is there (a running job has one too: its stream is closed).
    assert row.locator("button.live-cancel").is_enabled()

    workers.work_once()  # the first call: 3-4 s, then 529; its retry waits, scheduled
    job.refresh_from_db()
    assert job.status == "retrying" and job.attempts == 1
    row.locator("td.status:text('retrying')").wait_for(timeout=15_000)
    assert "next attempt at" in row.locator("td.output").inner_text()
    row.locator("button.live-cancel").click()
    row.locator("td.status:text('cancelled')").wait_for(timeout=15_000)
    assert row.locator("button.live-cancel").count() == 0

    workers.drain()  # the scheduled retry finds the job cancelled: no second call
    job.refresh_from_db()
    assert job.status == "cancelled" and job.attempts == 1
    assert fake_provider.stats()["requests"] == 1
