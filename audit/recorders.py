"""What the audit trail records, whichever path makes the change (the admin, the API, a
command, a service): every save and delete of the audited models, by their signals, and the
key events that are not saves (rotate, revoke: ``keys.signals.api_key_event``).

Each model names the fields that are not worth a record (clocks, counters): a save that
changes only those records nothing."""

from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.apps import apps
from django.db import models
from django.db.models.signals import post_delete, post_save, pre_save

from audit.models import AuditRecord
from audit.services import audit_record, redact_url
from keys.signals import api_key_event

__all__ = ["AUDITED", "connect"]

AUDITED: dict[str, frozenset[str]] = {
    "providers.Provider": frozenset({"updated_at"}),
    "ledger.ModelPrice": frozenset(),
    "ledger.Budget": frozenset({"created_at", "updated_at"}),
    "features.FeaturePolicy": frozenset({"updated_at", "updated_by"}),
    # A rotation and a revoke are recorded as such (keys.signals); last use is not a change.
    "keys.ApiKey": frozenset({"created_at", "last_used_at", "prefix", "revoked_at"}),
}
"""Audited model -> its fields left out of the records."""

_BEFORE = "_audit_before"


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def _values(instance: models.Model, ignored: frozenset[str]) -> dict[str, Any]:
    values = {}
    for field in instance._meta.concrete_fields:
        if field.primary_key or field.name in ignored:
            continue
        value = field.value_from_object(instance)
        if isinstance(field, models.DecimalField) and value is not None:
            # As the database keeps it: "7.50" saved is "7.500000" read back, not a change.
            value = Decimal(value).quantize(Decimal(1).scaleb(-field.decimal_places))
        value = _plain(value)
        values[field.name] = redact_url(value) if field.name == "base_url" else value
    return values


def _label(sender: type[models.Model]) -> str:
    return sender._meta.label_lower


def _before(sender: type[models.Model], instance: models.Model, **kwargs: Any) -> None:
    if kwargs.get("raw") or instance.pk is None:
        return
    old = sender._default_manager.filter(pk=instance.pk).first()
    ignored = AUDITED[sender._meta.label]
    setattr(instance, _BEFORE, _values(old, ignored) if old is not None else None)


def _saved(
    sender: type[models.Model], instance: models.Model, created: bool, **kwargs: Any
) -> None:
    if kwargs.get("raw"):
        return
    after = _values(instance, AUDITED[sender._meta.label])
    before = None if created else getattr(instance, _BEFORE, None)
    fields = kwargs.get("update_fields")
    changes = {
        name: [before.get(name) if before else None, value]
        for name, value in after.items()
        if (before is None or before.get(name) != value) and (not fields or name in fields)
    }
    if before is not None and not changes:
        return
    audit_record(
        action=AuditRecord.Action.CREATED if before is None else AuditRecord.Action.CHANGED,
        target_type=_label(sender),
        target_id=instance.pk,
        target=str(instance),
        changes=changes,
    )


def _deleted(sender: type[models.Model], instance: models.Model, **kwargs: Any) -> None:
    before = _values(instance, AUDITED[sender._meta.label])
    audit_record(
        action=AuditRecord.Action.DELETED,
        target_type=_label(sender),
        target_id=instance.pk,
        target=str(instance),
        changes={name: [value, None] for name, value in before.items()},
    )


def _key_event(*, key: Any, action: str, changes: dict[str, Any], **kwargs: Any) -> None:
    audit_record(
        action=action,
        target_type="keys.apikey",
        target_id=key.pk,
        target=f"{key} of {key.user_id}",
        changes={name: [_plain(a), _plain(b)] for name, (a, b) in changes.items()},
    )


def connect() -> None:
    for label in AUDITED:
        model = apps.get_model(label)
        pre_save.connect(_before, sender=model, dispatch_uid=f"audit_before_{label}")
        post_save.connect(_saved, sender=model, dispatch_uid=f"audit_saved_{label}")
        post_delete.connect(_deleted, sender=model, dispatch_uid=f"audit_deleted_{label}")
    api_key_event.connect(_key_event, dispatch_uid="audit_key_event")
