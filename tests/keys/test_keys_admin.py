"""API keys in the admin: adding one shows its secret on the answer only (no redirect, no
message, not cached); staff see every user's keys and revoke them with the action; a key is
never edited or deleted. And the ops dashboard's spend by key."""

import re
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from jobs.models import LlmJob
from keys.models import ApiKey
from keys.testing import api_key_for
from ledger.models import CostEntry, ModelPrice
from tests.conftest import job_body, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(
        make_user("root", "add_apikey", "view_apikey", "revoke_apikey", is_staff=True)
    )
    return client


def test_adding_a_key_shows_its_secret_once_on_the_answer(staff_client: Client, alice: Any) -> None:
    superuser = Client()
    superuser.force_login(make_user("boss", is_staff=True, superuser=True))
    response = superuser.post(
        "/admin/keys/apikey/add/",
        {"user": alice.id, "name": "nightly", "scopes": ["jobs:write"], "rpm": "30",
         "max_budget_usd": "5", "budget_period": "day"},
    )  # fmt: skip
    assert response.status_code == 200, response.content[:2000]
    assert "no-store" in response["Cache-Control"]
    secret = re.search(rb'value="(llmq_[A-Za-z0-9_-]{43})"', response.content)
    assert secret is not None
    key = ApiKey.objects.get(user=alice, name="nightly")
    assert key.scopes == ["jobs:write"] and key.rpm == 30
    assert key.budgets.get().limit_usd == Decimal("5")
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret[1].decode()}")
    assert api.post("/api/v1/jobs/", job_body(), format="json").status_code == 202
    # Never again: not on the key's page, not in the list.
    for page in ("/admin/keys/apikey/", f"/admin/keys/apikey/{key.id}/change/"):
        shown = staff_client.get(page)
        assert shown.status_code == 200 and secret[1] not in shown.content
        assert key.prefix.encode() in shown.content


def test_staff_revoke_any_users_keys_with_the_action(
    staff_client: Client, alice: Any, bob: Any
) -> None:
    secrets = [api_key_for(alice), api_key_for(bob)]
    ids = [ApiKey.objects.get(prefix=s[:12]).id for s in secrets]
    response = staff_client.post(
        "/admin/keys/apikey/",
        {"action": "revoke_keys", "_selected_action": [str(i) for i in ids], "index": "0"},
    )
    assert response.status_code == 302
    assert all(k.revoked_at is not None for k in ApiKey.objects.filter(id__in=ids))
    for secret in secrets:
        assert (
            APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/me/").status_code == 401
        )


def test_the_dashboard_shows_spend_by_key(alice: Any, prices: None) -> None:
    secret = api_key_for(alice, name="nightly")
    key = ApiKey.objects.get(prefix=secret[:12])
    job_id = (
        APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}")
        .post("/api/v1/jobs/", job_body(), format="json")
        .json()["id"]
    )
    job = LlmJob.objects.get(id=job_id)
    price = ModelPrice.objects.filter(model=job.model).first()
    CostEntry.objects.create(
        job=job, attempt=1, feature=job.feature, model=job.model, user=alice, api_key=key,
        price=price, outcome="success", cost_usd=Decimal("1.25"),
    )  # fmt: skip
    client = Client()
    client.force_login(make_user("ops", is_staff=True))
    rows = client.get("/admin/ops/dashboard/data.json").json()["spend_by_key"]
    assert rows == [
        {"key": f"nightly (#{key.id}, {key.prefix}...)", "user": "alice", "scopes": key.scopes,
         "state": "active", "url": f"/admin/keys/apikey/{key.id}/change/", "jobs": 1,
         "cost_usd": "1.250000", "today_usd": "1.250000"}
    ]  # fmt: skip
    page = client.get("/admin/ops/dashboard/")
    assert b"Spend by API key" in page.content


def test_the_demo_key_is_printed_again_and_replaced_once_revoked(alice: Any) -> None:
    from keys.demo import demo_key_ensure
    from keys.services import api_key_revoke

    first = demo_key_ensure(user=alice)
    assert demo_key_ensure(user=alice) == first
    assert ApiKey.objects.filter(user=alice, name="demo").count() == 1
    assert APIClient(HTTP_AUTHORIZATION=f"Bearer {first}").get("/api/v1/me/").status_code == 200
    api_key_revoke(key=ApiKey.objects.get(user=alice, name="demo"))
    second = demo_key_ensure(user=alice)
    assert second != first
    assert APIClient(HTTP_AUTHORIZATION=f"Bearer {second}").get("/api/v1/me/").status_code == 200
