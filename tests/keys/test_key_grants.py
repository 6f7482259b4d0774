"""What a key, or staff who may add keys, can give (issue 36, faults 2 to 4), end to end through
the admin and the API: staff add keys for themselves only (a superuser for anyone); a narrow
key cannot rotate or revoke a wider key of its user; a key minted by a key gets at most its
creator's budget and rate, and spends against the creator's budget too. Real MariaDB, Redis
and fake provider."""

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import LlmJob
from keys.models import ApiKey
from keys.scopes import ALL_SCOPES
from keys.testing import api_key_for
from ledger.models import Budget, BudgetReservation, BudgetWindow, CostEntry
from ledger.services import job_upper_bound_cost
from tests.conftest import job_body, make_user
from tests.ledger.test_budgets import run_concurrently

KEYS = "/api/v1/keys/"


def api(secret: str) -> APIClient:
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}")


def mint(secret: str, **body: Any) -> Any:
    return api(secret).post(
        KEYS, {"name": "minted", "scopes": ["jobs:write"], **body}, format="json"
    )


@pytest.mark.django_db
def test_staff_who_may_add_keys_cannot_mint_one_that_acts_as_a_superuser() -> None:
    root = make_user("root", is_staff=True, superuser=True)
    staff = make_user("keeper", "add_apikey", "view_apikey", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    form = browser.get("/admin/keys/apikey/add/")
    assert form.status_code == 200
    assert b'name="user"' not in form.content  # no choice of whose key it is

    answer = browser.post(
        "/admin/keys/apikey/add/",
        {
            "user": root.id,
            "name": "escalate",
            "scopes": ["jobs:read", "jobs:write", "admin"],
            "budget_period": "month",
        },
    )
    assert answer.status_code == 200, answer.content[:2000]
    assert not ApiKey.objects.filter(user=root).exists()
    key = ApiKey.objects.get(name="escalate")
    assert key.user_id == staff.id  # the key acts as the staff user who added it
    secret = answer.content.split(b'value="llmq_', 1)[1].split(b'"', 1)[0].decode()
    me = api("llmq_" + secret).get("/api/v1/me/")
    assert me.status_code == 200 and me.json()["username"] == "keeper", me.content


@pytest.mark.django_db
def test_a_superuser_adds_a_key_for_another_user(alice: Any) -> None:
    browser = Client()
    browser.force_login(make_user("root", is_staff=True, superuser=True))
    assert b'name="user"' in browser.get("/admin/keys/apikey/add/").content
    answer = browser.post(
        "/admin/keys/apikey/add/",
        {"user": alice.id, "name": "for-alice", "scopes": ["jobs:read"], "budget_period": "month"},
    )
    assert answer.status_code == 200
    assert ApiKey.objects.get(name="for-alice").user_id == alice.id


@pytest.mark.django_db
def test_a_narrow_key_cannot_rotate_or_revoke_a_wider_key_of_its_user(alice: Any) -> None:
    full_secret = api_key_for(alice, name="production")  # every scope, never expires
    full = ApiKey.objects.get(user=alice, name="production")
    narrow = api(full_secret).post(
        KEYS,
        {"name": "narrow", "scopes": ["admin"],
         "expires_at": (timezone.now() + timedelta(hours=1)).isoformat()},
        format="json",
    ).json()  # fmt: skip

    for action in ("rotate", "revoke"):
        refused = api(narrow["key"]).post(
            f"{KEYS}{full.id}/{action}/", {"grace_seconds": 0}, format="json"
        )
        assert refused.status_code == 403, refused.content
        body = refused.json()
        assert body["code"] == "key_not_covered"
        assert "llmq_" not in refused.content.decode()
        assert body["detail"]["wider"] == [
            "the scopes jobs:read, jobs:write, costs:read",
            "a longer lifetime",
        ]
    full.refresh_from_db()
    assert full.revoked_at is None and full.secrets.count() == 1
    assert api(full_secret).get("/api/v1/me/").status_code == 200  # its holder is not cut off

    # A key may still rotate itself, and the wider key may rotate and revoke the narrow one.
    assert api(narrow["key"]).post(f"{KEYS}{narrow['id']}/rotate/").status_code == 200
    rotated = api(full_secret).post(
        f"{KEYS}{narrow['id']}/rotate/", {"grace_seconds": 0}, format="json"
    )
    assert rotated.status_code == 200
    revoked = api(rotated.json()["key"]).post(f"{KEYS}{narrow['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["active"] is False


@pytest.mark.django_db
def test_a_key_with_a_budget_cannot_rotate_one_without(alice: Any) -> None:
    unlimited = api_key_for(alice, name="unlimited")
    target = ApiKey.objects.get(name="unlimited")
    capped = mint(unlimited, scopes=list(ALL_SCOPES), max_budget_usd="1.00")
    capped_rate = mint(unlimited, scopes=list(ALL_SCOPES), rpm=5)
    for minted, wider in ((capped, "a larger budget"), (capped_rate, "a higher rate")):
        refused = api(minted.json()["key"]).post(f"{KEYS}{target.id}/rotate/")
        assert refused.status_code == 403 and refused.json()["detail"]["wider"] == [wider]


@pytest.mark.django_db
def test_a_minted_key_gets_at_most_its_creators_budget_and_rate(alice: Any) -> None:
    parent = mint(
        api_key_for(alice), scopes=["admin", "jobs:write"], max_budget_usd="1.00", rpm=5
    ).json()
    assert (parent["max_budget_usd"], parent["rpm"]) == ("1.000000", 5)

    child = mint(parent["key"])  # asks for neither: gets the creator's
    assert child.status_code == 201, child.content
    assert (child.json()["max_budget_usd"], child.json()["rpm"]) == ("1.000000", 5)
    assert child.json()["budget_period"] == "month"
    assert ApiKey.objects.get(id=child.json()["id"]).parent_id == parent["id"]

    smaller = mint(parent["key"], max_budget_usd="0.25", budget_period="day", rpm=2)
    assert smaller.status_code == 201
    assert (smaller.json()["max_budget_usd"], smaller.json()["rpm"]) == ("0.250000", 2)

    for body, code, maximum in (
        ({"max_budget_usd": "1.01"}, "invalid_max_budget_usd", "1.000000"),
        ({"rpm": 6}, "invalid_rpm", 5),
    ):
        refused = mint(parent["key"], **body)
        assert refused.status_code == 400, refused.content
        assert refused.json()["code"] == code
        assert refused.json()["detail"]["maximum"] == maximum
    assert ApiKey.objects.filter(user=alice).count() == 4  # nothing half-made by the refusals


@pytest.mark.django_db
def test_a_minted_key_submits_within_its_creators_rate(alice: Any) -> None:
    parent = mint(api_key_for(alice), scopes=["admin", "jobs:write"], rpm=3).json()
    first, second = (mint(parent["key"]).json() for _ in range(2))
    answers = [api(first["key"]).post("/api/v1/jobs/", job_body(), format="json")]
    answers += [api(second["key"]).post("/api/v1/jobs/", job_body(), format="json")]
    answers += [api(first["key"]).post("/api/v1/jobs/", job_body(), format="json")]
    assert [a.status_code for a in answers] == [202, 202, 202]
    refused = api(second["key"]).post("/api/v1/jobs/", job_body(), format="json")
    assert refused.status_code == 429 and refused.json()["code"] == "throttled"
    assert refused.json()["detail"]["api_key"] == parent["id"]
    assert "minted this one" in refused.json()["message"]


BODY = job_body(feature="minted-keys", max_tokens=16)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")
def test_minted_keys_spend_against_their_creators_budget(
    alice: Any, fake_provider: Any, workers: Any
) -> None:
    fake_provider.faults({}, latency_ms="50-150")
    bound = job_upper_bound_cost(
        job=LlmJob(feature=BODY["feature"], model=BODY["model"], messages=BODY["messages"],
                   max_tokens=BODY["max_tokens"])
    )  # fmt: skip
    limit = (bound * 4).quantize(Decimal("0.000001"))
    parent = mint(
        api_key_for(alice), scopes=["admin", "jobs:write"], max_budget_usd=str(limit),
        budget_period="day",
    ).json()  # fmt: skip
    children = [mint(parent["key"]).json() for _ in range(2)]
    ids = []
    for _ in range(6):
        for child in children:
            answer = api(child["key"]).post("/api/v1/jobs/", BODY, format="json")
            if answer.status_code == 202:
                ids.append(answer.json()["id"])
            else:
                assert answer.json()["code"] == "budget_exceeded", answer.content
    for _ in range(40):
        waiting = [
            str(i)
            for i in LlmJob.objects.filter(
                id__in=ids, status__in=LlmJob.WAITING_STATUSES
            ).values_list("id", flat=True)
        ]
        if not waiting:
            break
        workers.release_scheduled()
        run_concurrently(waiting, workers=6)

    jobs = LlmJob.objects.filter(id__in=ids)
    assert set(jobs.values_list("status", flat=True)) <= {"completed", "failed"}
    completed = jobs.filter(status="completed").count()
    assert completed >= 4
    assert jobs.filter(status="failed", error_code="budget_exceeded").exists()
    budget = Budget.objects.get(api_key_id=parent["id"])
    entries = CostEntry.objects.filter(api_key_id__in=[c["id"] for c in children])
    spent = sum(entries.values_list("cost_usd", flat=True), Decimal(0))
    # The provider's own bill, not our rows: what the children spent is what it billed.
    assert Decimal(fake_provider.stats()["billed"]["cost_usd"]) == spent
    assert fake_provider.stats()["requests"] == completed
    assert BudgetWindow.objects.get(budget=budget).spent_usd == spent <= limit
    assert not BudgetReservation.objects.filter(settled_at__isnull=True).exists()
    # Each child also holds its own budget (the creator's limit, inherited): both counted.
    for child in children:
        own = Budget.objects.get(api_key_id=child["id"])
        mine = entries.filter(api_key_id=child["id"])
        child_spent = sum(mine.values_list("cost_usd", flat=True), Decimal(0))
        window = BudgetWindow.objects.filter(budget=own).first()
        assert (window.spent_usd if window else Decimal(0)) == child_spent
