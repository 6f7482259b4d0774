"""Whose secret signs a delivery, the secrets that sign it now, and rolling one.

An API key's secret signs what was submitted with the key; a feature's signs what was submitted
without one (a session). The secrets are derived (webhooks/signing.py), so only the owner's
generation is stored: a roll moves to the next one and returns the new secret, the one time it
is shown; the previous secret goes on signing beside it for ``WEBHOOK_SECRET_ROLL_GRACE_SECONDS``
so that receivers can switch without losing an event.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from webhooks.models import WebhookSigningSecret
from webhooks.signing import feature_owner, key_owner, secret_for, signing_key

__all__ = ["RolledSecret", "signer_for", "signing_secret_roll", "signing_secrets_for"]


@dataclass(frozen=True)
class RolledSecret:
    secret: str
    """Shown this once: nothing stores it."""
    generation: int
    previous_valid_until: datetime | None
    """Until then the previous secret signs beside it; None: it does not (a first secret)."""


def signer_for(*, api_key_id: int | None, feature: str) -> str:
    """The owner whose secret signs a subject submitted with ``api_key_id`` (or none)."""
    return key_owner(api_key_id) if api_key_id is not None else feature_owner(feature)


def _key() -> str:
    return signing_key(configured=settings.WEBHOOK_SIGNING_KEY, secret_key=settings.SECRET_KEY)


def signing_secrets_for(owner: str) -> list[str]:
    """The secrets that sign ``owner``'s deliveries now: the current one, then the previous one
    while its grace runs."""
    row = WebhookSigningSecret.objects.filter(owner=owner).first()
    generation = row.generation if row is not None else 0
    secrets = [secret_for(key=_key(), owner=owner, generation=generation)]
    if row is not None and row.previous_valid_until and row.previous_valid_until > timezone.now():
        secrets.append(secret_for(key=_key(), owner=owner, generation=generation - 1))
    return secrets


@transaction.atomic
def signing_secret_roll(*, owner: str, user: User | None = None) -> RolledSecret:
    """Move ``owner`` to a new signing secret and return it (shown once: nothing stores it).
    The first roll of an owner replaces the secret every owner starts with, which nobody saw,
    at once; a later roll keeps the previous one signing for the grace period."""
    now = timezone.now()
    row, created = WebhookSigningSecret.objects.select_for_update().get_or_create(owner=owner)
    grace = timedelta(seconds=settings.WEBHOOK_SECRET_ROLL_GRACE_SECONDS)
    # Generation 0 was never shown to anyone: no receiver checks against it.
    row.previous_valid_until = now + grace if row.rolled_at is not None and grace else None
    before = row.generation
    row.generation += 1
    row.rolled_at, row.rolled_by = now, user
    row.save()
    # As a key's rotation is: who rolled which owner's secret, when (never the secret).
    until = row.previous_valid_until.isoformat() if row.previous_valid_until else None
    audit_record(
        action="rotated",
        target_type="webhooks.webhooksigningsecret",
        target_id=row.id,
        target=f"webhook signing secret of {owner}",
        changes={"generation": [before, row.generation], "previous_valid_until": [None, until]},
    )
    secret = secret_for(key=_key(), owner=owner, generation=row.generation)
    return RolledSecret(secret, row.generation, row.previous_valid_until)
