"""The ops dashboard: staff only, numbers equal to the rows seeded, and Redis down still served.

Rows are seeded through the ORM at chosen times. ``created_at`` is ``auto_now_add``, so rows
that need another time are written with a raw save (still an insert: the ledger allows it). The
selector tests pass a fixed ``now``; the HTTP tests use the real clock.
"""

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import count
from pathlib import Path
from typing import Any

import django_rq
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rq import SimpleWorker

from dlq.models import FailureRecord
from jobs.models import LlmJob, ProviderBreaker
from ledger.models import Budget, CostEntry
from llmops.queues import DEFAULT_QUEUE, LLM_QUEUE
from ops.dashboard import COST_DAYS, dashboard_data
from tests.conftest import submit
from tests.jobs.test_outages import redis_down
from tests.jobs.test_takeover import Processes, status_of, wait_for, worker_env

NOW = datetime(2026, 3, 10, 12, 30, 20, tzinfo=UTC)
PAGE = "/admin/ops/dashboard/"
DATA = "/admin/ops/dashboard/data.json"

_attempts = count(1)


# --- Actors and rows ------------------------------------------------------------------------------


@pytest.fixture
def staff_client(db: None) -> Client:
    """Sam: staff, with no model permission at all; staff is what the dashboard asks."""
    user = get_user_model().objects.create_user("sam", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def owner(db: None) -> Any:
    return get_user_model().objects.create_user("owen", password="pw")


def make_job(owner: Any, **fields: Any) -> LlmJob:
    defaults: dict[str, Any] = {
        "feature": "alpha",
        "model": "claude-haiku-4-5",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 5,
        "request_fingerprint": "fp",
        "status": LlmJob.Status.COMPLETED,
        "attempts": 1,
    }
    return LlmJob.objects.create(user=owner, **{**defaults, **fields})


def ledger_row(
    job: LlmJob,
    at: datetime,
    *,
    outcome: str = CostEntry.Outcome.SUCCESS,
    cost: str = "0.010000",
    entry_type: str = CostEntry.EntryType.ATTEMPT,
    feature: str | None = None,
) -> CostEntry:
    entry = CostEntry(
        job=job,
        attempt=next(_attempts),
        entry_type=entry_type,
        feature=feature or job.feature,
        model=job.model,
        user_id=job.user_id,
        outcome=outcome,
        cost_usd=Decimal(cost),
        created_at=at,
    )
    entry.save_base(raw=True, force_insert=True)
    return entry


def dead_letter(job: LlmJob, at: datetime, severity: str, state: str = "open") -> FailureRecord:
    record = FailureRecord(
        job=job,
        severity=severity,
        reason_code="server_error",
        attempts=3,
        request_snapshot={},
        state=state,
        created_at=at,
    )
    record.save_base(raw=True, force_insert=True)
    return record


def minutes_ago(n: float, now: datetime = NOW) -> datetime:
    return now - timedelta(minutes=n)


def position(data: dict, moment: datetime) -> int:
    """Where the minute of ``moment`` sits in the per-minute series."""
    since = datetime.fromisoformat(str(data["window"]["since"]))
    return int((moment.replace(second=0, microsecond=0) - since).total_seconds() // 60)


# --- Access ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [PAGE, DATA])
def test_it_sends_an_anonymous_visitor_to_the_admin_login(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/admin/login/?next={url}"


@pytest.mark.parametrize("url", [PAGE, DATA])
def test_it_sends_a_signed_in_user_who_is_not_staff_to_the_admin_login(
    client: Client, owner: Any, url: str
) -> None:
    client.force_login(owner)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_a_staff_member_gets_the_page_its_scripts_and_a_link_from_the_admin_index(
    staff_client: Client,
) -> None:
    page = staff_client.get(PAGE)
    assert page.status_code == 200
    html = page.content.decode()
    for canvas in ("throughput", "failures", "timings", "severity", "cost", "budgets"):
        assert f'id="chart-{canvas}"' in html
    assert "/static/ops/vendor/chart.umd.min.js" in html
    assert "/static/ops/dashboard.js" in html
    assert f'data-url="{DATA}"' in html
    assert "<script>" not in html.split("<body", 1)[1], "no inline script in the page body"
    index = staff_client.get("/admin/").content.decode()
    assert f'<a href="{PAGE}">Ops dashboard</a>' in index


def test_an_unknown_window_is_refused_and_the_default_is_six_hours(staff_client: Client) -> None:
    refused = staff_client.get(DATA, {"hours": "3"})
    assert refused.status_code == 400
    assert refused.json()["code"] == "invalid_window"
    data = staff_client.get(DATA).json()
    assert data["window"]["hours"] == 6
    assert len(data["throughput"]["labels"]) == 360
    assert data["refresh_seconds"] == 10


# --- Numbers against seeded rows ------------------------------------------------------------------


def test_attempts_completions_and_dead_letters_are_counted_per_minute(owner: Any) -> None:
    job = make_job(owner)
    two = minutes_ago(2)
    for outcome in ("success", "error_response", "unknown_outcome"):
        ledger_row(job, two.replace(second=5), outcome=outcome)
    ledger_row(job, two.replace(second=50), entry_type=CostEntry.EntryType.CORRECTION)
    ledger_row(job, minutes_ago(10), cost="0.500000")
    ledger_row(job, minutes_ago(120), cost="7.000000")  # outside the 1 h window
    make_job(owner, completed_at=two)
    make_job(owner, completed_at=two)
    make_job(owner, status=LlmJob.Status.FAILED, completed_at=minutes_ago(3))
    make_job(owner, completed_at=minutes_ago(90))  # outside
    dead_letter(job, minutes_ago(3), "ERROR")
    dead_letter(job, minutes_ago(40), "CRITICAL", state="resolved")
    dead_letter(job, minutes_ago(200), "WARNING")  # outside, but open

    data = dashboard_data(hours=1, now=NOW)

    series = data["throughput"]
    assert len(series["labels"]) == 60
    assert series["labels"][-1] == "12:30"
    assert series["attempts"][position(data, two)] == 3
    assert series["failed_attempts"][position(data, two)] == 2
    assert series["attempts"][position(data, minutes_ago(10))] == 1
    assert series["completed_jobs"][position(data, two)] == 2
    assert series["dead_lettered"][position(data, minutes_ago(3))] == 1
    assert series["dead_lettered"][position(data, minutes_ago(40))] == 1
    assert data["summary"] == {
        "attempts": 4,
        "failed_attempts": 2,
        "completed_jobs": 2,
        "dead_lettered": 2,
        # Three attempts, the correction and the 10-minute-old row; not the 2-hour-old one.
        "cost_usd": "0.540000",
    }
    failures = data["failures"]
    assert failures["severities"] == ["WARNING", "ERROR", "CRITICAL"]
    assert failures["in_window"] == [0, 1, 1]
    assert failures["open"] == [1, 1, 0]
    assert failures["open_urls"][2] == (
        "/admin/dlq/failurerecord/?severity__exact=CRITICAL&state__exact=open"
    )

    wider = dashboard_data(hours=6, now=NOW)
    assert wider["summary"]["attempts"] == 5
    assert wider["summary"]["completed_jobs"] == 3
    assert wider["summary"]["dead_lettered"] == 3
    assert wider["failures"]["in_window"] == [1, 1, 1]


def test_wait_and_runtime_of_the_llm_queue_are_percentiles_of_one_attempt_jobs(owner: Any) -> None:
    for n in range(1, 21):
        enqueued = minutes_ago(30) + timedelta(seconds=n)
        started = enqueued + timedelta(seconds=n)  # waits of 1..20 s
        make_job(
            owner,
            enqueued_at=enqueued,
            started_at=started,
            completed_at=started + timedelta(seconds=10 * n),  # runtimes of 10..200 s
            status=LlmJob.Status.FAILED if n == 7 else LlmJob.Status.COMPLETED,
        )
    # A retried job keeps its first start and its last enqueue: left out.
    make_job(
        owner,
        attempts=3,
        enqueued_at=minutes_ago(20),
        started_at=minutes_ago(25),
        completed_at=minutes_ago(19),
    )
    # Finished before the window.
    make_job(
        owner,
        enqueued_at=minutes_ago(200),
        started_at=minutes_ago(190),
        completed_at=minutes_ago(100),
    )
    # Not finished.
    make_job(owner, status=LlmJob.Status.RUNNING, enqueued_at=minutes_ago(2), started_at=NOW)

    llm = dashboard_data(hours=1, now=NOW)["timings"][0]

    assert llm["queue"] == LLM_QUEUE
    assert llm["measured"] is True
    assert llm["samples"] == 20
    # Nearest rank: p50 is the 10th of 20, p95 the 19th.
    assert llm["wait"] == {"p50": 10.0, "p95": 19.0, "max": 20.0}
    assert llm["runtime"] == {"p50": 100.0, "p95": 190.0, "max": 200.0}


def test_no_finished_job_gives_no_percentile(owner: Any) -> None:
    llm = dashboard_data(hours=1, now=NOW)["timings"][0]
    assert llm["samples"] == 0
    assert llm["wait"] == {"p50": None, "p95": None, "max": None}


def test_cost_per_feature_per_day_covers_the_last_14_utc_days(owner: Any) -> None:
    alpha, beta = make_job(owner, feature="alpha"), make_job(owner, feature="beta")
    today = NOW.replace(hour=0, minute=0, second=0)
    ledger_row(alpha, today + timedelta(hours=1), cost="1.250000")
    ledger_row(alpha, today + timedelta(hours=12), cost="0.750000")
    ledger_row(beta, today - timedelta(seconds=1), cost="3.000000")  # yesterday, 23:59:59
    ledger_row(beta, today - timedelta(days=COST_DAYS - 1), cost="4.000000")  # first day shown
    ledger_row(alpha, today - timedelta(days=COST_DAYS), cost="100.000000")  # a day too old

    cost = dashboard_data(hours=1, now=NOW)["cost_per_day"]

    assert len(cost["days"]) == COST_DAYS
    assert cost["days"][0] == "2026-02-25"
    assert cost["days"][-1] == "2026-03-10"
    zeros = ["0.000000"] * COST_DAYS
    # Ranked by total: beta (7.00) before alpha (2.00).
    assert cost["features"] == [
        {"feature": "beta", "cost_usd": ["4.000000", *zeros[1:12], "3.000000", "0.000000"]},
        {"feature": "alpha", "cost_usd": [*zeros[:13], "2.000000"]},
    ]
    assert cost["total_usd"] == "9.000000"


def test_budget_use_is_the_budget_admins_usage_and_forecast(owner: Any) -> None:
    job = make_job(owner, feature="alpha")
    budget = Budget.objects.create(
        scope=Budget.Scope.FEATURE, feature="alpha", period=Budget.Period.DAY, limit_usd="2.00"
    )
    Budget.objects.create(
        scope=Budget.Scope.FEATURE, feature="beta", limit_usd="5.00", enabled=False
    )
    ledger_row(job, minutes_ago(30), cost="0.500000")
    ledger_row(job, NOW - timedelta(days=1), cost="9.000000")  # yesterday's window

    budgets = dashboard_data(hours=1, now=NOW)["budgets"]

    assert len(budgets) == 1
    row = budgets[0]
    assert row["name"] == "feature:alpha"
    assert row["spent_usd"] == "0.500000"
    assert row["limit_usd"] == "2.000000"
    assert row["percent_used"] == 25.0
    assert row["exhausted"] is False
    assert row["url"] == f"/admin/ledger/budget/{budget.id}/change/"


def test_breaker_state_and_recent_failures_link_to_their_admin_pages(owner: Any) -> None:
    breaker = ProviderBreaker.objects.create(
        provider="anthropic",
        state=ProviderBreaker.State.OPEN,
        reason_code="authentication_failed",
        opened_at=minutes_ago(5),
        next_probe_at=NOW + timedelta(seconds=30),
    )
    job = make_job(owner, feature="gamma", model="claude-sonnet-4-6")
    older = dead_letter(job, minutes_ago(50), "ERROR")
    newer = dead_letter(job, minutes_ago(5), "CRITICAL")

    data = dashboard_data(hours=1, now=NOW)

    assert data["breakers"]["breakers"] == [
        {
            "provider": "anthropic",
            "state": "open",
            "reason_code": "authentication_failed",
            "message": "",
            "opened_at": minutes_ago(5),
            "next_probe_at": NOW + timedelta(seconds=30),
            "probes": 0,
            "url": f"/admin/jobs/providerbreaker/{breaker.id}/change/",
        }
    ]
    records = data["recent_failures"]["records"]
    assert [r["id"] for r in records] == [newer.id, older.id]
    assert records[0]["url"] == f"/admin/dlq/failurerecord/{newer.id}/change/"
    assert records[0]["job_url"] == f"/admin/jobs/llmjob/{job.id}/change/"
    assert (records[0]["feature"], records[0]["model"]) == ("gamma", "claude-sonnet-4-6")
    assert data["recent_failures"]["dlq_url"] == "/admin/dlq/failurerecord/?state__exact=open"


def test_the_data_takes_the_same_queries_for_ten_rows_as_for_a_thousand(
    owner: Any, django_assert_max_num_queries: Any
) -> None:
    now = timezone.now()
    job = make_job(owner)
    for n in range(10):
        ledger_row(job, minutes_ago(n % 50, now))
    with django_assert_max_num_queries(30) as few:
        dashboard_data(hours=1)
    for n in range(990):
        ledger_row(job, minutes_ago(n % 50, now))
        if n % 10 == 0:
            make_job(owner, completed_at=minutes_ago(n % 50, now))
    with django_assert_max_num_queries(len(few.captured_queries)):
        data = dashboard_data(hours=1)
    assert data["summary"]["attempts"] == 1000


# --- Redis: queues, workers, rq timings -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # django-rq enqueues on commit
def test_queue_depth_oldest_wait_and_rq_timings_come_from_redis(staff_client: Client) -> None:
    queue = django_rq.get_queue(DEFAULT_QUEUE)
    for _ in range(2):
        queue.enqueue("time.sleep", 0.2)
    SimpleWorker([queue], connection=queue.connection).work(burst=True)
    queue.enqueue("time.sleep", 0)
    time.sleep(0.3)

    data = staff_client.get(DATA).json()

    assert data["queues"]["available"] is True
    default = next(q for q in data["queues"]["queues"] if q["name"] == DEFAULT_QUEUE)
    assert default["waiting"] == 1
    assert default["oldest_wait_seconds"] >= 0.3
    timings = {t["queue"]: t for t in data["timings"]}
    assert timings[DEFAULT_QUEUE]["samples"] == 2
    assert 0.2 <= timings[DEFAULT_QUEUE]["runtime"]["p50"] < 2
    assert timings["alerts"]["samples"] == 0
    assert data["queues"]["jobs_in_database"] == {"queued": 0, "retrying": 0, "running": 0}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_worker_running_an_llm_job_links_to_that_job(
    alice_client: Any, fake_provider: Any, tmp_path: Path
) -> None:
    fake_provider.faults({}, latency_ms=4000)
    job = submit(alice_client)
    staff = get_user_model().objects.create_user("sam", password="pw", is_staff=True)
    client = Client()
    client.force_login(staff)
    processes = Processes(tmp_path)
    try:
        processes.start(worker_env(fake_provider), "rqworker", LLM_QUEUE, "--burst")
        wait_for(
            lambda: status_of(job) == LlmJob.Status.RUNNING,
            timeout=30,
            what="the worker to start the job",
        )
        data = client.get(DATA).json()
    finally:
        processes.stop_all()

    busy = [w for w in data["workers"]["workers"] if w["current"]]
    assert len(busy) == 1, data["workers"]
    current = busy[0]["current"]
    assert current["llm_job"]["id"] == str(job.id)
    assert current["llm_job"]["url"] == f"/admin/jobs/llmjob/{job.id}/change/"
    assert current["llm_job"]["attempts"] == 1
    assert busy[0]["queues"] == [LLM_QUEUE]
    llm = next(q for q in data["queues"]["queues"] if q["name"] == LLM_QUEUE)
    assert llm["workers"] == 1
    assert data["queues"]["jobs_in_database"]["running"] == 1


def test_with_redis_down_the_redis_panels_say_so_and_the_rest_is_served(
    staff_client: Client, owner: Any, settings: Any
) -> None:
    job = make_job(owner, completed_at=timezone.now())
    ledger_row(job, timezone.now())
    with redis_down(settings):
        page = staff_client.get(PAGE)
        response = staff_client.get(DATA)
    assert page.status_code == 200
    assert response.status_code == 200
    data = response.json()
    for panel in (data["queues"], data["workers"]):
        assert panel["available"] is False
        assert panel["error"].startswith("Redis unavailable")
    assert data["queues"]["queues"] == [] and data["workers"]["workers"] == []
    timings = {t["queue"]: t for t in data["timings"]}
    assert timings[LLM_QUEUE]["measured"] is True
    assert timings[DEFAULT_QUEUE]["measured"] is False
    assert timings[DEFAULT_QUEUE]["source"].startswith("Redis unavailable")
    assert data["summary"]["attempts"] == 1
    assert data["summary"]["completed_jobs"] == 1


# --- Static files ---------------------------------------------------------------------------------


def test_collectstatic_collects_the_page_script_and_the_vendored_chart_library(
    settings: Any, tmp_path: Path
) -> None:
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", "--noinput", verbosity=0)
    vendored = tmp_path / "ops" / "vendor" / "chart.umd.min.js"
    assert vendored.read_bytes().startswith(b"/*!\n * Chart.js v4.")
    assert (tmp_path / "ops" / "vendor" / "LICENSE.md").exists()
    assert (tmp_path / "ops" / "dashboard.js").exists()
    assert (tmp_path / "ops" / "dashboard.css").exists()


def test_the_paused_panel_names_each_pause_and_the_jobs_waiting_on_it(owner: Any) -> None:
    """Issue 43, 1: the dashboard shows what is paused and how many jobs wait on it."""
    from features.models import FeaturePolicy
    from providers.models import Provider

    assert dashboard_data(hours=1, now=NOW)["paused"] == {"features": [], "providers": []}
    policy = FeaturePolicy.objects.create(feature="nightly", paused=True)
    provider, _ = Provider.objects.update_or_create(name="anthropic", defaults={"paused": True})
    waiting = {"status": LlmJob.Status.QUEUED, "attempts": 0}
    for _ in range(2):
        make_job(owner, feature="nightly", held_reason="feature_paused", **waiting)
    make_job(
        owner,
        feature="alpha",
        held_reason="provider_paused",
        current_model="claude-haiku-4-5",
        **waiting,
    )
    make_job(owner, feature="nightly", held_reason="feature_paused")  # completed: not waiting

    paused = dashboard_data(hours=1, now=NOW)["paused"]
    assert paused == {
        "features": [
            {
                "name": "nightly",
                "waiting": 2,
                "url": f"/admin/features/featurepolicy/{policy.id}/change/",
            }
        ],
        "providers": [
            {
                "name": "anthropic",
                "waiting": 1,
                "url": f"/admin/providers/provider/{provider.id}/change/",
            }
        ],
    }
