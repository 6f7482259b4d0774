"""Signing secrets and signatures (webhooks/signing.py, webhooks/signing_secrets.py): secrets
are derived, differ per owner and generation, are stored nowhere, roll with a grace period in
which both sign; ``verify`` accepts what ``signature_header`` signs and nothing else."""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from webhooks.models import WebhookSigningSecret
from webhooks.signing import secret_for, signature_header, verify
from webhooks.signing_secrets import signing_secret_roll, signing_secrets_for

BODY = b'{"type":"job.completed","job":{"id":"1"}}'


def test_a_signature_verifies_only_for_its_secret_body_and_time():
    secret = secret_for(key="k", owner="key:1", generation=1)
    header = signature_header(secrets=[secret], body=BODY)
    assert header.startswith("t=") and ",v1=" in header
    assert verify(secret=secret, header=header, body=BODY)
    assert not verify(secret=secret, header=header, body=BODY + b" ")
    assert not verify(
        secret=secret_for(key="k", owner="key:2", generation=1), header=header, body=BODY
    )
    old = signature_header(secrets=[secret], body=BODY, timestamp=int(time.time()) - 301)
    assert not verify(secret=secret, header=old, body=BODY)
    assert not verify(secret=secret, header="v1=abc", body=BODY)


def test_secrets_differ_per_owner_generation_and_server_key():
    secrets = {
        secret_for(key=key, owner=owner, generation=generation)
        for key in ("k1", "k2")
        for owner in ("key:1", "key:2", "feature:a")
        for generation in (0, 1)
    }
    assert len(secrets) == 12 and all(s.startswith("whsec_") for s in secrets)


@pytest.mark.django_db
def test_a_roll_shows_the_new_secret_once_stores_none_and_both_sign_during_the_grace(settings):
    settings.WEBHOOK_SECRET_ROLL_GRACE_SECONDS = 3600
    first = signing_secret_roll(owner="key:7").secret
    assert signing_secrets_for("key:7") == [first]  # generation 0 was never shown: no grace
    rolled = signing_secret_roll(owner="key:7")
    second = rolled.secret
    assert rolled.generation == 2 and rolled.previous_valid_until > timezone.now()
    assert signing_secrets_for("key:7") == [second, first]
    header = signature_header(secrets=signing_secrets_for("key:7"), body=BODY)
    assert verify(secret=first, header=header, body=BODY)
    assert verify(secret=second, header=header, body=BODY)
    WebhookSigningSecret.objects.filter(owner="key:7").update(
        previous_valid_until=timezone.now() - timedelta(seconds=1)
    )
    assert signing_secrets_for("key:7") == [second]
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM webhooks_webhooksigningsecret")
        stored = repr(cursor.fetchall())
    assert first not in stored and second not in stored and first[6:20] not in stored


@pytest.mark.django_db
def test_the_signing_key_changes_every_secret(settings):
    before = signing_secrets_for("feature:a")
    settings.WEBHOOK_SIGNING_KEY = "another-key-of-fifty-random-characters-or-more-000"
    assert signing_secrets_for("feature:a") != before
