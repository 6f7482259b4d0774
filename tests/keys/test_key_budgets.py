"""A key's ``max_budget_usd`` is a budget like a feature's or a user's, held by the same
reservations: 20 submitters at once on one key's daily budget, then 20 workers at once running
what they submitted, never settle more than the limit; the spent key is refused at submit
(429) while another key of the same user is not. Real MariaDB, Redis and fake provider."""

import threading
from decimal import Decimal
from typing import Any

import pytest
from rest_framework.test import APIClient

from jobs.models import LlmJob
from keys.models import ApiKey
from keys.testing import api_key_for
from ledger.models import Budget, BudgetReservation, BudgetWindow, CostEntry
from ledger.services import job_upper_bound_cost
from tests.conftest import job_body
from tests.ledger.test_budgets import run_concurrently
from tests.threads import in_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]

SUBMITTERS = 20
BODY = job_body(feature="nightly-digest", max_tokens=16)


def _submit_at_once(secret: str, count: int) -> list[Any]:
    """``count`` threads, each its own client and database connection, submit at once."""
    answers: list[Any] = []

    def submit(start: threading.Barrier) -> None:
        api = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}")
        start.wait()
        answers.append(api.post("/api/v1/jobs/", BODY, format="json"))

    in_threads(count, submit, timeout=60)
    return answers


def test_a_keys_daily_budget_holds_under_twenty_concurrent_submitters(
    alice: Any, fake_provider: Any, workers: Any
) -> None:
    fake_provider.faults({}, latency_ms="150-400")
    bound = job_upper_bound_cost(
        job=LlmJob(feature=BODY["feature"], model=BODY["model"], messages=BODY["messages"],
                   max_tokens=BODY["max_tokens"])
    )  # fmt: skip
    limit = (bound * 5).quantize(Decimal("0.000001"))  # five worst cases, about ten real calls
    admin = APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key_for(alice)}")
    created = admin.post(
        "/api/v1/keys/",
        {"name": "nightly", "scopes": ["jobs:write"], "max_budget_usd": str(limit),
         "budget_period": "day"},
        format="json",
    ).json()  # fmt: skip
    assert created["max_budget_usd"] == f"{limit:.6f}" and created["budget_period"] == "day"
    key = ApiKey.objects.get(id=created["id"])
    budget = Budget.objects.get(api_key=key)
    assert (budget.scope, budget.period, budget.limit_usd) == ("key", "day", limit)

    answers = _submit_at_once(created["key"], SUBMITTERS)
    assert [a.status_code for a in answers] == [202] * SUBMITTERS
    ids = [a.json()["id"] for a in answers]
    for _ in range(40):
        waiting = list(
            LlmJob.objects.filter(id__in=ids, status__in=LlmJob.WAITING_STATUSES).values_list(
                "id", flat=True
            )
        )
        if not waiting:
            break
        workers.release_scheduled()
        run_concurrently([str(i) for i in waiting], workers=SUBMITTERS)

    jobs = LlmJob.objects.filter(id__in=ids)
    assert set(jobs.values_list("status", flat=True)) <= {"completed", "failed"}
    assert set(jobs.values_list("api_key_id", flat=True)) == {key.id}
    failed = jobs.filter(status="failed")
    completed = jobs.filter(status="completed").count()
    assert completed >= 5 and failed.count() >= 1
    assert all(job.error_code == "budget_exceeded" and job.attempts == 0 for job in failed)

    entries = CostEntry.objects.filter(job__in=ids)
    assert set(entries.values_list("api_key_id", flat=True)) == {key.id}  # the ledger says whose
    spent = sum(entries.values_list("cost_usd", flat=True), Decimal(0))
    window = BudgetWindow.objects.get(budget=budget)
    assert window.spent_usd == spent <= limit
    assert not BudgetReservation.objects.filter(settled_at__isnull=True).exists()
    assert fake_provider.stats()["requests"] == completed

    # Spent for today: the key is refused at submit, its user's other keys are not.
    refused = APIClient(HTTP_AUTHORIZATION=f"Bearer {created['key']}").post(
        "/api/v1/jobs/", BODY, format="json"
    )
    assert window.exhausted_alerted_at is not None  # a job was refused for good in this window
    assert refused.status_code == 429, refused.content
    assert refused.json()["code"] == "budget_exceeded"
    assert refused.json()["detail"]["budgets"][0]["budget"] == f"key:{key.id} nightly"
    other = APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key_for(alice, scopes=['jobs:write'])}")
    assert other.post("/api/v1/jobs/", BODY, format="json").status_code == 202


def test_a_key_whose_budget_cannot_take_a_jobs_worst_case_is_refused_at_submit(
    alice: Any, fake_provider: Any, workers: Any
) -> None:
    """Issue 37, fault 4: a key created with max_budget_usd 0.001 got 202 for a job whose worst
    case was far above it, and the job then failed budget_exceeded with 0 attempts. It is a 429
    at submit, as for a feature budget, and nothing is written."""
    admin = APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key_for(alice)}")
    created = admin.post(
        "/api/v1/keys/",
        {"name": "tiny", "scopes": ["jobs:write"], "max_budget_usd": "0.001"},
        format="json",
    ).json()
    body = job_body(feature="nightly-digest", max_tokens=4096)
    refused = APIClient(HTTP_AUTHORIZATION=f"Bearer {created['key']}").post(
        "/api/v1/jobs/", body, format="json"
    )
    assert refused.status_code == 429, refused.content
    answer = refused.json()
    assert answer["code"] == "budget_exceeded"
    assert Decimal(answer["detail"]["worst_case_usd"]) > Decimal("0.001")
    assert answer["detail"]["budgets"][0]["budget"] == f"key:{created['id']} tiny"
    assert "Retry-After" not in refused  # it never could fit: waiting does not help
    assert not LlmJob.objects.exists() and fake_provider.stats()["requests"] == 0
    # A job that fits is accepted and runs.
    small = job_body(feature="nightly-digest", max_tokens=16)
    accepted = APIClient(HTTP_AUTHORIZATION=f"Bearer {created['key']}").post(
        "/api/v1/jobs/", small, format="json"
    )
    assert accepted.status_code == 202, accepted.content
    workers.drain()
    assert LlmJob.objects.get().status == "completed"
