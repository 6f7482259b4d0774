"""/metrics: who may scrape it, and that its counters equal the ledger after real workers ran.

The mixed run goes through real `manage.py rqworker llm --with-scheduler` processes (rq's forking
worker: one work horse per job), started with only the documented environment, against the fake
provider with transient and fatal faults. Its counters are compared with aggregates the test
computes from the ledger itself, scraped while the run goes to check that no counter decreases,
and the whole output is checked by `promtool check metrics`.
"""

import shutil
import subprocess
import threading
import time
from collections import defaultdict
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from dlq.models import FailureRecord
from jobs.models import LlmJob
from jobs.services import job_cancel
from ledger.models import CostEntry
from metrics.counters import attempt_outcome
from metrics.models import AttemptCounter, JobCounter
from tests.conftest import FakeProvider, submit
from tests.jobs.test_takeover import (
    Processes,
    processes,  # noqa: F401  (fixture)
    queue_state,
    wait_for,
    worker_env,
)

TOKEN = "metrics-test-token-7f3a"


@pytest.fixture
def metrics_settings(settings: Any) -> Any:
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_NETWORKS = []
    return settings


def scrape(client: Client | None = None) -> str:
    response = (client or Client()).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of every sample in an exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def by_name(values: dict, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    result: dict[tuple[str, ...], float] = defaultdict(float)
    for (sample, pairs), value in values.items():
        if sample == name:
            labelled = dict(pairs)
            result[tuple(labelled[label] for label in labels)] += value
    return {key: value for key, value in result.items() if value}


# --- Access -------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/metrics", "/django-rq/metrics/", "/django-rq/metrics"])
def test_metrics_answer_only_to_the_token_or_an_allowed_network(path, metrics_settings):
    client = Client()
    anonymous = client.get(path)
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Bearer")
    assert anonymous.json()["code"] == "not_authenticated"
    assert client.get(path, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get(path, HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
    assert client.get(path, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200

    metrics_settings.METRICS_ALLOWED_NETWORKS = ["10.1.0.0/16", "fd00::/8"]
    assert client.get(path, REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get(path, REMOTE_ADDR="fd00::5").status_code == 200
    assert client.get(path, REMOTE_ADDR="10.2.0.1").status_code == 401
    assert client.get(path, REMOTE_ADDR="127.0.0.1").status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/metrics", "/django-rq/metrics/"])
def test_with_debug_on_the_loopback_network_reads_metrics_without_a_token(settings, path):
    """``make run`` runs with DEBUG on: the README's curl works without a restart; any other
    network still needs the token, and with DEBUG off loopback is nobody special."""
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_NETWORKS = []
    client = Client()
    settings.DEBUG = True
    assert client.get(path, REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get(path, REMOTE_ADDR="::1").status_code == 200
    assert client.get(path, REMOTE_ADDR="10.0.0.7").status_code == 401
    settings.DEBUG = False
    assert client.get(path, REMOTE_ADDR="127.0.0.1").status_code == 401


@pytest.mark.django_db
def test_no_token_configured_means_no_token_is_accepted(settings):
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_NETWORKS = []
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer  x").status_code == 401


@pytest.mark.django_db
def test_a_staff_session_does_not_open_django_rqs_metrics(metrics_settings, admin_client):
    assert admin_client.get("/django-rq/metrics/").status_code == 401


@pytest.mark.django_db
def test_the_exposition_has_http_db_rq_and_llm_families(metrics_settings, alice_client):
    alice_client.get("/api/v1/jobs/")
    text = scrape()
    for name in (
        "django_http_requests_total_by_method",
        "llm_queue_depth",
        "llm_metrics_source_up",
        "llm_budget_used_ratio",
    ):
        assert f"# TYPE {name}" in text, name
    rq = Client().get("/django-rq/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content
    assert b"rq_workers" in rq


# --- Counting in the transaction ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_a_rolled_back_transition_counts_nothing(alice_client, metrics_settings):
    job = submit(alice_client)

    def counted() -> dict[str, int]:
        # A counter row may have been made (at zero) on a connection of its own: only what is
        # counted matters.
        rows = JobCounter.objects.filter(jobs__gt=0).values_list("status", "jobs")
        return {status: jobs for status, jobs in rows}

    before = counted()
    with pytest.raises(RuntimeError), transaction.atomic():
        job_cancel(job=job)
        raise RuntimeError("roll back")
    assert counted() == before == {"queued": 1}
    job_cancel(job=LlmJob.objects.get(id=job.id))
    values = samples(scrape())
    assert by_name(values, "llm_jobs_total", "status") == {("queued",): 1, ("cancelled",): 1}


# --- The mixed run through real worker processes -------------------------------------------------


def ledger_expectations() -> dict[str, dict[tuple[str, ...], float]]:
    """What the counters must say, computed here straight from the ledger rows."""
    expected: dict[str, dict[tuple[str, ...], float]] = defaultdict(lambda: defaultdict(float))
    kinds = {
        "input": "input_tokens",
        "output": "output_tokens",
        "cache_write_5m": "cache_write_5m_tokens",
        "cache_write_1h": "cache_write_1h_tokens",
        "cache_read": "cache_read_tokens",
    }
    for entry in CostEntry.objects.all():
        pair = (entry.feature, entry.model)
        if entry.entry_type == "attempt":
            outcome = attempt_outcome(outcome=entry.outcome, reason_code=entry.reason_code)
            expected["llm_attempts_total"][(*pair, outcome)] += 1
            if entry.latency_ms is not None:
                expected["llm_provider_latency_seconds_count"][pair] += 1
        for kind, column in kinds.items():
            expected["llm_tokens_total"][(*pair, kind)] += getattr(entry, column)
        expected["net_cost"][pair] += float(entry.cost_usd)
    for job in LlmJob.objects.all():
        expected["llm_jobs_total"][(job.feature, job.model, "queued")] += 1
        if job.status in ("completed", "cancelled"):
            expected["llm_jobs_total"][(job.feature, job.model, job.status)] += 1
    for record in FailureRecord.objects.select_related("job"):
        expected["llm_jobs_total"][(record.job.feature, record.job.model, "failed")] += 1
        expected["llm_failures_total"][(record.severity.lower(), record.reason_code)] += 1
    attempts = CostEntry.objects.filter(entry_type="attempt")
    for entry in attempts:
        expected["llm_jobs_total"][(entry.feature, entry.model, "running")] += 1
        if entry.retry_delay_seconds is not None:
            expected["llm_jobs_total"][(entry.feature, entry.model, "retrying")] += 1
    return {name: {k: v for k, v in values.items() if v} for name, values in expected.items()}


@pytest.mark.slow
def test_counters_equal_the_ledger_after_a_mixed_run_through_real_worker_processes(
    transactional_db, prices, alice_client, fake_provider: FakeProvider, processes: Processes,  # noqa: F811
    metrics_settings, settings, no_breaker,
):  # fmt: skip
    # Transient faults that retry (429, 529, 500, a dropped connection) and fatal ones (400).
    # A high requests limit: an injected 429 reports it, and the limiter paces to what it learns.
    fake_provider.faults(
        {"429": 0.15, "529": 0.05, "500": 0.05, "drop": 0.03, "400": 0.07}, rpm=6000
    )
    env = worker_env(
        fake_provider,
        LLM_RETRY_DELAY_SCALE="0.001",
        LLM_STREAM_IDLE_SECONDS="5",
        LLM_BREAKER_ENABLED="False",
    )
    for _ in range(3):
        processes.start(env, "rqworker", "llm", "--with-scheduler")

    seen: list[dict] = []
    stop = threading.Event()

    def scrape_while_running() -> None:
        client = Client()
        while not stop.is_set():
            seen.append(samples(scrape(client)))
            time.sleep(0.2)

    scraper = threading.Thread(target=scrape_while_running, daemon=True)
    scraper.start()
    features = ["email-classify", "summarize", "translate"]
    jobs = [
        submit(alice_client, feature=features[i % 3], model="claude-sonnet-4-6") for i in range(60)
    ]
    submit(alice_client, feature="summarize", model="claude-haiku-4-5")
    try:
        wait_for(
            lambda: not LlmJob.objects.exclude(status__in=LlmJob.FINAL_STATUSES).exists(),
            timeout=240,
            what="every job final",
            every=0.5,
        )
    except AssertionError:
        raise AssertionError(f"{queue_state()}\n{processes.logs()}") from None
    finally:
        stop.set()
        scraper.join(timeout=30)
    assert len(jobs) == 60
    statuses = set(LlmJob.objects.values_list("status", flat=True))
    assert {"completed", "failed"} <= statuses, statuses
    assert CostEntry.objects.filter(retry_delay_seconds__isnull=False).exists(), "no retry ran"

    final = samples(scrape())
    seen.append(final)
    expected = ledger_expectations()
    assert by_name(final, "llm_attempts_total", "feature", "model", "outcome") == pytest.approx(
        expected["llm_attempts_total"]
    )
    assert by_name(final, "llm_tokens_total", "feature", "model", "kind") == pytest.approx(
        expected["llm_tokens_total"]
    )
    assert by_name(final, "llm_jobs_total", "feature", "model", "status") == pytest.approx(
        expected["llm_jobs_total"]
    )
    assert by_name(final, "llm_failures_total", "severity", "reason") == pytest.approx(
        expected["llm_failures_total"]
    )
    assert by_name(
        final, "llm_provider_latency_seconds_count", "feature", "model"
    ) == pytest.approx(expected["llm_provider_latency_seconds_count"])
    cost = by_name(final, "llm_cost_usd_total", "feature", "model")
    credited = by_name(final, "llm_cost_usd_credited_total", "feature", "model")
    net = {pair: cost.get(pair, 0) - credited.get(pair, 0) for pair in cost}
    assert net == pytest.approx(expected["net_cost"], abs=1e-6)
    ledger_sum = sum(CostEntry.objects.values_list("cost_usd", flat=True), Decimal(0))
    assert sum(net.values()) == pytest.approx(float(ledger_sum), abs=1e-6)
    assert by_name(final, "llm_queue_depth", "queue").get(("llm",), 0) == 0
    assert by_name(final, "llm_workers", "queue")[("llm",)] == 3

    # No counter ever went down between two scrapes.
    assert len(seen) > 5
    for earlier, later in zip(seen, seen[1:], strict=False):
        for key, value in earlier.items():
            name = key[0]
            if name.endswith(("_total", "_bucket", "_count", "_sum")) and key in later:
                assert later[key] >= value, f"{key} went from {value} to {later[key]}"

    # The command agrees, and a rebuild from the ledger changes nothing.
    call_command("llm_metrics", "--check")
    before = sorted(samples(scrape()).items())
    call_command("llm_metrics", "--rebuild")
    call_command("llm_metrics", "--check")
    after = samples(scrape())
    for key, value in before:
        if key[0].startswith(("llm_jobs", "llm_attempts", "llm_tokens", "llm_failures")):
            assert after.get(key, 0) == value, key
    assert AttemptCounter.objects.count() >= 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_promtool_accepts_the_exposition(alice_client, workers, metrics_settings, fake_provider):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: make test installs it (scripts/prometheus-deps.sh)"
    fake_provider.faults({"429": 0.3})
    for _ in range(5):
        submit(alice_client)
    # A 429 that still shows room makes the limiter pace one call at a time: the jobs it holds
    # wait for their slots in real time, which the fast-forwarding drain cannot skip.
    deadline = time.monotonic() + 60
    while True:
        try:
            workers.drain()
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    text = scrape()
    assert "llm_provider_latency_seconds_bucket" in text
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
