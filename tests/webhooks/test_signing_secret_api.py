"""``POST /api/v1/webhooks/signing-secret/``: a key's holder makes its webhook signing secret and
rolls it; the new one is shown once and signs from then on, the previous one beside it through
the grace; a session (no key) is told where its secrets come from; the key needs ``jobs:write``."""

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditRecord
from keys.models import ApiKey
from keys.testing import api_key_for
from tests.conftest import Workers, submit
from tests.webhooks.helpers import receiver, signature_ok
from webhooks.models import WebhookSigningSecret

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("prices")]


def roll(client: Any) -> dict[str, Any]:
    response = client.post("/api/v1/webhooks/signing-secret/")
    assert response.status_code == 201, response.content
    return response.json()


def test_a_roll_signs_with_the_new_secret_and_the_old_one_through_the_grace(
    alice, alice_client, workers, settings
):
    settings.CALLBACK_ALLOW_PRIVATE_HOSTS = True
    first = roll(alice_client)
    key = ApiKey.objects.get(user=alice)
    assert first["signer"] == f"key:{key.id}" and first["generation"] == 1
    assert first["previous_valid_until"] is None and first["secret"].startswith("whsec_")
    second = roll(alice_client)
    assert second["generation"] == 2 and second["previous_valid_until"]
    assert second["secret"] != first["secret"]
    with receiver() as hook:
        submit(alice_client, callback_url=hook.url)
        workers.drain()
        Workers("alerts").drain()
        (request,) = hook.wait_for(1)
    assert request["headers"]["LLM-Signature"].count("v1=") == 2
    assert signature_ok(request, second["secret"]) and signature_ok(request, first["secret"])
    stored = repr(list(WebhookSigningSecret.objects.values()))
    assert first["secret"] not in stored and second["secret"] not in stored
    # Audited as a key's rotation is, without the secret.
    records = AuditRecord.objects.filter(target_type="webhooks.webhooksigningsecret")
    assert [r.changes["generation"] for r in records.order_by("id")] == [[0, 1], [1, 2]]
    assert {r.actor_api_key_id for r in records} == {key.id}
    assert first["secret"] not in repr(list(records.values()))


def test_each_key_has_its_own_secret(alice, alice_client):
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(alice, name='other')}")
    assert roll(alice_client)["secret"] != roll(other)["secret"]


def test_a_session_has_no_key_secret_and_a_key_without_jobs_write_is_refused(alice):
    session = Client()
    session.force_login(alice)
    response = session.post("/api/v1/webhooks/signing-secret/")
    assert response.status_code == 400 and response.json()["code"] == "no_api_key"
    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(alice, scopes=['jobs:read'])}")
    response = reader.post("/api/v1/webhooks/signing-secret/")
    assert response.status_code == 403 and response.json()["code"] == "insufficient_scope"
