"""``/api/v1/keys/`` and what a key is worth at the door: created with its secret shown once,
listed without it, working (``Bearer`` and ``Token``) until revoked or expired and then 401 at
once, rotated with a grace period for the old secret, scoped, and never able to mint a wider
or longer-lived key than itself. Real MariaDB and Redis."""

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from keys.hashing import secret_hash
from keys.models import ApiKey, ApiKeySecret
from keys.testing import api_key_for
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

KEYS = "/api/v1/keys/"


def client(secret: str | None = None, scheme: str = "Bearer") -> APIClient:
    api = APIClient()
    if secret is not None:
        api.credentials(HTTP_AUTHORIZATION=f"{scheme} {secret}")
    return api


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code, body
    return body


def create(api: APIClient, **body: Any) -> Any:
    return api.post(KEYS, {"name": "nightly", "scopes": ["jobs:write"], **body}, format="json")


def test_it_creates_a_key_shows_its_secret_once_and_lists_it_without(alice: Any) -> None:
    admin = client(api_key_for(alice))
    expires = (timezone.now() + timedelta(days=30)).replace(microsecond=0)
    response = create(admin, scopes=["jobs:read", "jobs:write"], expires_at=expires.isoformat())
    assert response.status_code == 201, response.content
    created = response.json()
    assert set(created) >= {"id", "name", "prefix", "scopes", "expires_at", "key"}
    secret = created["key"]
    assert secret.startswith("llmq_") and len(secret) == 48
    assert created["prefix"] == secret[:12] and created["name"] == "nightly"
    assert created["scopes"] == ["jobs:read", "jobs:write"]
    assert datetime.fromisoformat(created["expires_at"].replace("Z", "+00:00")) == expires

    listed = admin.get(KEYS).json()["results"]
    mine = next(row for row in listed if row["id"] == created["id"])
    assert "key" not in mine and secret not in str(listed)
    assert mine["prefix"] == created["prefix"] and mine["active"] is True
    # Stored: the keyed hash and the prefix, never the secret.
    stored = ApiKeySecret.objects.get(key_id=created["id"])
    assert stored.secret_hash == secret_hash(secret) != secret
    assert secret not in str(list(ApiKey.objects.filter(id=created["id"]).values()))

    me = client(secret).get("/api/v1/me/")
    assert me.status_code == 200 and me.json()["username"] == "alice"


def test_bearer_and_token_both_take_a_key_and_anything_else_is_401(alice: Any) -> None:
    secret = api_key_for(alice)
    assert client(secret, "Bearer").get("/api/v1/me/").status_code == 200
    assert client(secret, "Token").get("/api/v1/me/").status_code == 200
    assert client(secret, "bearer").get("/api/v1/me/").status_code == 200
    wrong = assert_error(client(secret[:-1] + "x").get("/api/v1/me/"), 401, "authentication_failed")
    assert wrong["message"] == "Invalid API key."
    assert_error(client("x" * 5000).get("/api/v1/me/"), 401, "authentication_failed")
    assert_error(client(secret, "Basic").get("/api/v1/me/"), 401, "authentication_failed")


def test_a_key_works_until_revoked_then_answers_401_at_once(alice: Any) -> None:
    secret = api_key_for(alice, scopes=["jobs:read"])
    key = ApiKey.objects.get(prefix=secret[:12])
    api = client(secret)
    assert api.get("/api/v1/jobs/").status_code == 200
    revoked = client(api_key_for(alice)).post(f"{KEYS}{key.id}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    body = assert_error(api.get("/api/v1/jobs/"), 401, "authentication_failed")
    assert "revoked" in body["message"] and secret not in str(body)
    # Revoking again changes nothing.
    again = client(api_key_for(alice)).post(f"{KEYS}{key.id}/revoke/")
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]


def test_a_key_works_until_it_expires_then_answers_401_at_once(alice: Any) -> None:
    expires = timezone.now() + timedelta(seconds=1.5)
    created = create(
        client(api_key_for(alice)), scopes=["jobs:read"], expires_at=expires.isoformat()
    )
    api = client(created.json()["key"])
    assert api.get("/api/v1/jobs/").status_code == 200
    time.sleep(max(0.0, (expires - timezone.now()).total_seconds()) + 0.1)
    body = assert_error(api.get("/api/v1/jobs/"), 401, "authentication_failed")
    assert "expired" in body["message"]


def test_a_rotated_keys_old_secret_works_through_its_grace_period_only(alice: Any) -> None:
    old = api_key_for(alice, scopes=["jobs:read"])
    key = ApiKey.objects.get(prefix=old[:12])
    rotated = client(old).post(f"{KEYS}{key.id}/rotate/", {"grace_seconds": 2}, format="json")
    assert rotated.status_code == 200, rotated.content
    body = rotated.json()
    new = body["key"]
    assert new != old and body["id"] == key.id and body["prefix"] == new[:12]
    assert body["scopes"] == ["jobs:read"]
    grace_end = datetime.fromisoformat(body["previous_key_expires_at"].replace("Z", "+00:00"))
    # Both work during the grace period ...
    assert client(old).get("/api/v1/jobs/").status_code == 200
    assert client(new).get("/api/v1/jobs/").status_code == 200
    # ... then the old one answers 401 and the new one goes on.
    time.sleep(max(0.0, (grace_end - timezone.now()).total_seconds()) + 0.1)
    refused = assert_error(client(old).get("/api/v1/jobs/"), 401, "authentication_failed")
    assert "grace period" in refused["message"]
    assert client(new).get("/api/v1/jobs/").status_code == 200


def test_a_rotation_keeps_the_old_secret_a_day_by_default_and_revoking_ends_both(
    alice: Any,
) -> None:
    old = api_key_for(alice)
    key = ApiKey.objects.get(prefix=old[:12])
    before = timezone.now()
    body = client(old).post(f"{KEYS}{key.id}/rotate/").json()
    grace_end = datetime.fromisoformat(body["previous_key_expires_at"].replace("Z", "+00:00"))
    assert timedelta(hours=23, minutes=59) < grace_end - before <= timedelta(hours=24, seconds=5)
    new = body["key"]
    assert client(old).get("/api/v1/me/").status_code == 200
    assert client(new).post(f"{KEYS}{key.id}/revoke/").status_code == 200
    assert_error(client(old).get("/api/v1/me/"), 401, "authentication_failed")
    assert_error(client(new).get("/api/v1/me/"), 401, "authentication_failed")
    assert_error(client(api_key_for(alice)).post(f"{KEYS}{key.id}/rotate/"), 409, "key_revoked")


def test_bad_input_is_refused_with_a_stable_code(alice: Any) -> None:
    api = client(api_key_for(alice))
    past = (timezone.now() - timedelta(minutes=1)).isoformat()
    cases = [
        ({"scopes": ["jobs:read"]}, "invalid_name"),
        ({"name": "x"}, "invalid_scopes"),
        ({"name": "x", "scopes": []}, "invalid_scopes"),
        ({"name": "x", "scopes": ["jobs:delete"]}, "invalid_scopes"),
        ({"name": "x", "scopes": "jobs:read"}, "invalid_scopes"),
        ({"name": "x", "scopes": ["jobs:read"], "expires_at": past}, "invalid_expires_at"),
        ({"name": "x", "scopes": ["jobs:read"], "expires_at": "tomorrow"}, "invalid_expires_at"),
        ({"name": "x", "scopes": ["jobs:read"], "rpm": 0}, "invalid_rpm"),
        ({"name": "x", "scopes": ["jobs:read"], "max_budget_usd": "-1"}, "invalid_max_budget_usd"),
        ({"name": "x", "scopes": ["jobs:read"], "budget_period": "week"}, "invalid_budget_period"),
        ({"name": "x", "scopes": ["jobs:read"], "owner": "bob"}, "unknown_field"),
    ]
    for body, code in cases:
        assert_error(api.post(KEYS, body, format="json"), 400, code)
    unknown = api.post(KEYS, {"name": "x", "scopes": ["jobs:read", "root"]}, format="json")
    assert unknown.json()["detail"]["unknown"] == ["root"]
    key = ApiKey.objects.filter(user=alice).first()
    assert key is not None
    for grace in (-1, "soon", 10**9):
        rotate = api.post(f"{KEYS}{key.id}/rotate/", {"grace_seconds": grace}, format="json")
        assert_error(rotate, 400, "invalid_grace_seconds")
    assert ApiKey.objects.filter(user=alice).count() == 1  # nothing was created


def test_a_key_cannot_give_a_scope_or_a_lifetime_it_does_not_have(alice: Any) -> None:
    admin_only = client(api_key_for(alice, scopes=["admin"]))
    wider = assert_error(create(admin_only, scopes=["jobs:write"]), 403, "insufficient_scope")
    assert wider["detail"]["required_scope"] == "jobs:write"
    assert create(admin_only, scopes=["admin"]).status_code == 201

    soon = timezone.now() + timedelta(hours=1)
    created = create(
        client(api_key_for(alice)), scopes=["admin", "jobs:read"], expires_at=soon.isoformat()
    ).json()
    short_lived = client(created["key"])
    assert_error(create(short_lived, scopes=["jobs:read"]), 400, "invalid_expires_at")
    later = (soon + timedelta(minutes=1)).isoformat()
    assert_error(
        create(short_lived, scopes=["jobs:read"], expires_at=later), 400, "invalid_expires_at"
    )
    earlier = (soon - timedelta(minutes=1)).isoformat()
    assert create(short_lived, scopes=["jobs:read"], expires_at=earlier).status_code == 201


def test_keys_are_managed_with_admin_but_a_key_may_revoke_or_rotate_itself(
    alice: Any, bob: Any
) -> None:
    reader_secret = api_key_for(alice, scopes=["jobs:read"])
    reader = client(reader_secret)
    other = ApiKey.objects.get(prefix=api_key_for(alice, scopes=["jobs:read"])[:12])
    body = assert_error(reader.get(KEYS), 403, "insufficient_scope")
    assert body["detail"] == {"required_scope": "admin", "scopes": ["jobs:read"]}
    assert_error(create(reader), 403, "insufficient_scope")
    assert_error(reader.post(f"{KEYS}{other.id}/revoke/"), 403, "insufficient_scope")
    assert_error(reader.post(f"{KEYS}{other.id}/rotate/"), 403, "insufficient_scope")
    own = ApiKey.objects.get(prefix=reader_secret[:12])
    rotated = reader.post(f"{KEYS}{own.id}/rotate/", {"grace_seconds": 0}, format="json")
    assert rotated.status_code == 200
    assert_error(reader.get("/api/v1/me/"), 401, "authentication_failed")  # grace 0: at once
    renewed = client(rotated.json()["key"])
    assert renewed.post(f"{KEYS}{own.id}/revoke/").status_code == 200
    # Another user's key is not there, whatever the key's scopes.
    bobs = ApiKey.objects.get(prefix=api_key_for(bob)[:12])
    assert_error(client(api_key_for(alice)).post(f"{KEYS}{bobs.id}/revoke/"), 404, "key_not_found")
    assert ApiKey.objects.get(id=bobs.id).revoked_at is None


def test_last_used_at_is_written_at_most_once_a_minute(alice: Any, settings: Any) -> None:
    secret = api_key_for(alice)
    key = ApiKey.objects.get(prefix=secret[:12])
    assert key.last_used_at is None
    api = client(secret)
    with CaptureQueriesContext(connection) as queries:
        for _ in range(10):
            assert api.get("/api/v1/me/").status_code == 200
    updates = [
        q["sql"] for q in queries if q["sql"].startswith("UPDATE") and "keys_apikey" in q["sql"]
    ]
    assert len(updates) == 1, updates
    first = ApiKey.objects.get(id=key.id).last_used_at
    assert first is not None and abs((timezone.now() - first).total_seconds()) < 5
    # A minute later (here: the interval made 0), the next request writes it again.
    settings.API_KEY_LAST_USED_INTERVAL_SECONDS = 0
    api.get("/api/v1/me/")
    assert ApiKey.objects.get(id=key.id).last_used_at > first


def test_a_key_still_works_after_the_hash_secret_is_rotated_with_a_fallback(
    alice: Any, settings: Any
) -> None:
    settings.API_KEY_HASH_SECRET = "first-hash-secret"
    secret = api_key_for(alice)
    settings.API_KEY_HASH_SECRET = "second-hash-secret"
    assert_error(client(secret).get("/api/v1/me/"), 401, "authentication_failed")
    settings.API_KEY_HASH_SECRET_FALLBACKS = ["first-hash-secret"]
    assert client(secret).get("/api/v1/me/").status_code == 200
    # Hashed again under the new secret at that use: the fallback can go.
    settings.API_KEY_HASH_SECRET_FALLBACKS = []
    assert client(secret).get("/api/v1/me/").status_code == 200
    stored = ApiKeySecret.objects.get(prefix=secret[:12])
    assert stored.secret_hash == secret_hash(secret, hash_secret="second-hash-secret")


def test_an_inactive_users_keys_answer_401(alice: Any) -> None:
    secret = api_key_for(alice)
    alice.is_active = False
    alice.save(update_fields=["is_active"])
    assert_error(client(secret).get("/api/v1/me/"), 401, "authentication_failed")


def test_every_submit_records_its_key(alice: Any) -> None:
    from agents.models import AgentRun
    from batches.models import Batch
    from jobs.models import LlmJob
    from pipelines.models import Pipeline

    secret = api_key_for(alice, scopes=["jobs:write"])
    key = ApiKey.objects.get(prefix=secret[:12])
    api = client(secret)
    job = api.post("/api/v1/jobs/", job_body(), format="json")
    batch = api.post(
        "/api/v1/batches/",
        {"feature": "f", "model": "claude-sonnet-4-6",
         "items": [{"messages": job_body()["messages"], "max_tokens": 64}]},
        format="json",
    )  # fmt: skip
    pipeline = api.post("/api/v1/pipelines/", {"steps": [job_body(), job_body()]}, format="json")
    run = api.post(
        "/api/v1/agent-runs/",
        {k: job_body()[k] for k in ("feature", "model", "messages", "max_tokens")},
        format="json",
    )
    assert {r.status_code for r in (job, batch, pipeline, run)} == {202}
    assert LlmJob.objects.get(id=job.json()["id"]).api_key_id == key.id
    assert Batch.objects.get(id=batch.json()["id"]).api_key_id == key.id
    assert Pipeline.objects.get(id=pipeline.json()["id"]).api_key_id == key.id
    assert AgentRun.objects.get(id=run.json()["id"]).api_key_id == key.id
    # Every job they made, too; a session's job records none.
    assert set(LlmJob.objects.filter(user=alice).values_list("api_key_id", flat=True)) == {key.id}
    session = APIClient()
    session.force_login(alice)
    by_session = session.post("/api/v1/jobs/", job_body(), format="json")
    assert LlmJob.objects.get(id=by_session.json()["id"]).api_key_id is None


def test_a_keys_rpm_limits_its_submissions_a_minute_not_its_users_other_keys(alice: Any) -> None:
    limited = create(client(api_key_for(alice)), scopes=["jobs:write"], rpm=3).json()
    assert limited["rpm"] == 3
    api = client(limited["key"])
    answers = [api.post("/api/v1/jobs/", job_body(), format="json") for _ in range(3)]
    assert [answer.status_code for answer in answers] == [202] * 3
    batch = {
        "feature": "f",
        "model": "claude-sonnet-4-6",
        "items": [{"messages": job_body()["messages"], "max_tokens": 64}],
    }
    refused = api.post("/api/v1/batches/", batch, format="json")
    body = assert_error(refused, 429, "throttled")
    assert body["detail"]["rpm"] == 3 and int(refused["Retry-After"]) >= 1
    assert "3 times a minute" in body["message"]
    # Reads are not submissions; another key of the same user is not limited by this one's rpm.
    assert client(limited["key"]).get("/api/v1/me/").status_code == 200
    other = client(api_key_for(alice, scopes=["jobs:write"]))
    assert other.post("/api/v1/jobs/", job_body(), format="json").status_code == 202


def test_the_cost_report_groups_by_key(alice: Any, prices: None) -> None:
    from jobs.models import LlmJob
    from ledger.models import CostEntry, ModelPrice

    secret = api_key_for(alice, name="nightly", scopes=["jobs:write", "costs:read"])
    key = ApiKey.objects.get(prefix=secret[:12])
    api = client(secret)
    job = LlmJob.objects.get(id=api.post("/api/v1/jobs/", job_body(), format="json").json()["id"])
    price = ModelPrice.objects.filter(model=job.model).first()
    for attempt, cost in ((1, "0.25"), (2, "0.50")):
        CostEntry.objects.create(
            job=job, attempt=attempt, feature=job.feature, model=job.model, user=alice,
            api_key=key, price=price, outcome="success", cost_usd=cost,
        )  # fmt: skip
    report = api.get("/api/v1/costs/?group_by=key&since=1d")
    assert report.status_code == 200, report.content
    rows = report.json()["rows"]
    assert rows == [
        {**rows[0], "key": f"nightly (#{key.id}, {key.prefix}...)", "cost_usd": "0.750000",
         "attempts": 2, "jobs": 1}
    ]  # fmt: skip
    assert_error(
        client(api_key_for(alice, scopes=["jobs:read"])).get("/api/v1/costs/"),
        403,
        "insufficient_scope",
    )


def test_expires_at_without_a_zone_is_utc(alice: Any) -> None:
    naive = (datetime.now(UTC) + timedelta(days=1)).replace(tzinfo=None, microsecond=0)
    created = create(client(api_key_for(alice)), expires_at=naive.isoformat()).json()
    assert created["expires_at"].startswith(naive.isoformat())
