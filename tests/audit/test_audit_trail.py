"""Every change to providers, prices, budgets, feature policies and keys leaves an audit record
(who, when, what changed), from the admin, the API or a command, readable in the admin and
never editable there. Real MariaDB and Redis; the ASGI server of the Procfile for the API under
the server production runs, and a real ``manage.py`` process for a command."""

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditRecord
from keys.models import ApiKey
from keys.testing import api_key_for
from ledger.models import Budget
from llmops.env import database_url
from tests.conftest import make_user

ROOT = Path(__file__).resolve().parents[2]


def records(target_type: str) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(target_type=target_type).order_by("id"))


@pytest.mark.django_db
def test_a_budget_changed_in_the_admin_names_the_staff_user_and_the_fields() -> None:
    staff = make_user("bea", "view_budget", "change_budget", "add_budget", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    budget = Budget.objects.create(scope="feature", feature="digest", limit_usd=Decimal("5"))
    form = {
        "scope": "feature", "feature": "digest", "period": "month", "limit_usd": "7.50",
        "soft_alert_percent": "80", "on_exceed": "reject", "enabled": "on",
    }  # fmt: skip
    answer = browser.post(f"/admin/ledger/budget/{budget.id}/change/", form)
    assert answer.status_code == 302, answer.content.decode()[-1500:]
    created, changed = records("ledger.budget")
    assert (created.action, created.source) == ("created", "system")
    assert (changed.action, changed.source, changed.actor) == ("changed", "admin", "bea")
    assert changed.actor_user_id == staff.id and changed.target_id == str(budget.id)
    assert changed.changes == {"limit_usd": ["5.000000", "7.500000"]}

    # Readable in the admin, never editable or deletable there.
    page = browser.get("/admin/audit/auditrecord/")
    assert page.status_code == 403  # bea lacks the view permission of the audit trail
    root = Client()
    root.force_login(make_user("root", is_staff=True, superuser=True))
    page = root.get("/admin/audit/auditrecord/")
    assert page.status_code == 200 and b"bea" in page.content
    detail = root.get(f"/admin/audit/auditrecord/{changed.id}/change/")
    assert detail.status_code == 200
    assert b"<tr><th>limit_usd</th><td>5.000000</td><td>7.500000</td></tr>" in detail.content
    assert root.get("/admin/audit/auditrecord/add/").status_code == 403
    assert root.post(f"/admin/audit/auditrecord/{changed.id}/delete/").status_code == 403


@pytest.mark.django_db
def test_keys_created_rotated_and_revoked_through_the_api_name_the_key_that_did_it(
    alice: Any,
) -> None:
    secret = api_key_for(alice, name="ops")
    ops = ApiKey.objects.get(name="ops")
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}")
    minted = api.post(
        "/api/v1/keys/", {"name": "ci", "scopes": ["jobs:write"], "rpm": 10}, format="json"
    ).json()
    assert api.post(f"/api/v1/keys/{minted['id']}/rotate/").status_code == 200
    assert api.post(f"/api/v1/keys/{minted['id']}/revoke/").status_code == 200
    trail = [r for r in records("keys.apikey") if r.target_id == str(minted["id"])]
    assert [r.action for r in trail] == ["created", "rotated", "revoked"]
    for record in trail:
        assert record.source == "api" and record.actor_user_id == alice.id
        assert record.actor_api_key_id == ops.id
        assert record.actor == f"alice (key {ops.id}, {ops.prefix}...)"
    assert trail[0].changes["rpm"] == [None, 10] and trail[0].changes["parent"] == [None, ops.id]
    assert trail[1].where == f"POST /api/v1/keys/{minted['id']}/rotate/"
    assert set(trail[1].changes) == {"prefix", "previous_secrets_end"}
    assert trail[2].changes["revoked_at"][0] is None
    # No secret in the trail: only the displayed prefix.
    assert minted["key"] not in str([r.changes for r in trail])


@pytest.mark.django_db(transaction=True)
def test_a_feature_policy_put_through_the_asgi_server_names_its_user(asgi_server: str) -> None:
    staff = make_user("fiona", "change_featurepolicy", "view_featurepolicy", is_staff=True)
    secret = api_key_for(staff, name="policy-bot")
    answer = httpx.put(
        f"{asgi_server}/api/v1/features/digest/",
        json={"deadline_seconds": 3600},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=20,
    )
    assert answer.status_code == 200, answer.text
    created, record = records("features.featurepolicy")  # the first PUT creates the row
    assert created.action == "created" and created.actor_user_id == staff.id
    key = ApiKey.objects.get(name="policy-bot")
    assert (record.source, record.actor_user_id, record.actor_api_key_id) == (
        "api",
        staff.id,
        key.id,
    )
    assert record.where == "PUT /api/v1/features/digest/"
    assert record.changes["deadline_seconds"] == [None, 3600]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("prices")  # a transactional test's flush took the seeded providers
def test_a_price_added_by_a_command_names_the_command() -> None:
    db = connection.settings_dict
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url(db)
    done = subprocess.run(
        [sys.executable, "manage.py", "llm_model", "add", "audit-model", "--provider",
         "anthropic", "--input-price", "1", "--output-price", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = [r for r in records("ledger.modelprice") if r.target.startswith("audit-model")]
    assert record.source == "command" and record.action == "created"
    assert "manage.py llm_model add" in record.actor and record.where == "llm_model add"
    assert record.changes["input_per_mtok"] == [None, "1.0000"]
