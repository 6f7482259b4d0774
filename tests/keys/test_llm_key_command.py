"""``manage.py llm_key``: create prints the secret alone on standard output, once; list, revoke
and rotate; bad options say which and why."""

import io
import re
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from keys.models import ApiKey

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("llm_key", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_prints_the_secret_once_and_it_works_with_its_scopes(alice: Any) -> None:
    out, err = run("create", "--user", "alice", "--name", "nightly", "--scopes", "jobs:write")
    secret = out.strip()
    assert re.fullmatch(r"llmq_[A-Za-z0-9_-]{43}", secret), out
    key = ApiKey.objects.get(user=alice, name="nightly")
    assert f"key {key.id} 'nightly' of alice" in err and secret not in err
    assert key.scopes == ["jobs:write"]
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert api.get("/api/v1/jobs/").json()["code"] == "insufficient_scope"
    listed, _ = run("list", "--user", "alice")
    assert "nightly" in listed and secret not in listed and "active" in listed


def test_create_with_limits_and_expiry(alice: Any) -> None:
    out, _ = run(
        "create", "--user", str(alice.id), "--name", "capped", "--scopes", "jobs:read,jobs:write",
        "--expires-at", "2999-01-01T00:00:00Z", "--max-budget-usd", "5", "--budget-period", "day",
        "--rpm", "30",
    )  # fmt: skip
    key = ApiKey.objects.get(name="capped")
    assert key.rpm == 30 and key.expires_at is not None and key.expires_at.year == 2999
    budget = key.budgets.get()
    assert (budget.scope, budget.period, str(budget.limit_usd)) == ("key", "day", "5.000000")


def test_revoke_and_rotate(alice: Any) -> None:
    old = run("create", "--user", "alice", "--name", "ci", "--scopes", "admin")[0].strip()
    key = ApiKey.objects.get(name="ci")
    new, err = run("rotate", str(key.id), "--grace-seconds", "0")
    assert new.strip().startswith("llmq_") and new.strip() != old and "old secret works" in err
    assert APIClient(HTTP_AUTHORIZATION=f"Bearer {old}").get("/api/v1/me/").status_code == 401
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {new.strip()}")
    assert api.get("/api/v1/me/").status_code == 200
    out, _ = run("revoke", str(key.id))
    assert "Revoked key" in out
    assert api.get("/api/v1/me/").status_code == 401


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--scopes", "jobs:everything"), "--scopes: Unknown scopes: jobs:everything"),
        (("--scopes", "jobs:read", "--expires-at", "2001-01-01T00:00:00"), "--expires-at: "),
        (("--scopes", "jobs:read", "--rpm", "0"), "--rpm: "),
    ],
)
def test_bad_options_say_which(alice: Any, args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        run("create", "--user", "alice", "--name", "x", *args)
    assert not ApiKey.objects.exists()


def test_an_unknown_user_or_key_is_an_error(alice: Any) -> None:
    with pytest.raises(CommandError, match="no user 'nobody'"):
        run("create", "--user", "nobody", "--name", "x", "--scopes", "jobs:read")
    with pytest.raises(CommandError, match="No API key 999999"):
        run("revoke", "999999")
