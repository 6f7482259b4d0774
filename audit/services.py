"""Writes of the audit trail: ``audit_record``, called by the recorders (audit/recorders.py) in
the transaction of the change it records, so that a change and its record commit together.

A change of where a provider's calls go, or of the variable its key is read from, also raises
a WARNING alert: it decides which host receives every prompt of that provider and its key.
"""

import logging
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from alerts.notifications import alert_raise
from audit.context import current_actor
from audit.models import AuditRecord

__all__ = ["ENDPOINT_FIELDS", "audit_record", "redact_url"]

logger = logging.getLogger(__name__)

ENDPOINT_FIELDS = ("base_url", "api_key_env")
"""A provider's fields that decide where its calls (prompts and key) go."""


def redact_url(value: Any) -> Any:
    """A URL without the user and password it may carry (``https://user:secret@host``)."""
    if not isinstance(value, str) or "@" not in value:
        return value
    parts = urlsplit(value)
    if not parts.username and not parts.password:
        return value
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def audit_record(
    *, action: str, target_type: str, target_id: Any, target: str, changes: dict[str, Any]
) -> AuditRecord:
    """Record one change by whoever is acting now (audit/context.py)."""
    actor = current_actor()
    record = AuditRecord.objects.create(
        source=actor.source,
        actor=actor.name,
        actor_user_id=actor.user_id,
        actor_api_key_id=actor.api_key_id,
        where=actor.where,
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        target=target[:200],
        changes=changes,
    )
    logger.info(
        "audit: %s %s %s %s (%s)", actor.name, action, target_type, target, ", ".join(changes)
    )
    if target_type == "providers.provider" and _endpoint_changed(record):
        _alert_endpoint_change(record)
    return record


def _endpoint_changed(record: AuditRecord) -> bool:
    if not any(field in record.changes for field in ENDPOINT_FIELDS):
        return False
    # A provider created by a data migration or a test's seed is the default, not a change.
    return record.action != AuditRecord.Action.CREATED or record.source != "system"


def _alert_endpoint_change(record: AuditRecord) -> None:
    lines = [
        f"{field}: {before or '(empty)'} -> {after or '(empty)'}"
        for field, (before, after) in record.changes.items()
        if field in ENDPOINT_FIELDS
    ]
    alert_raise(
        fingerprint=f"provider_endpoint_changed:{record.target_id}:{record.id}",
        severity="WARNING",
        title=f"Provider {record.target}: where its calls go was changed by {record.actor}",
        body=(
            f"{record.actor} ({record.source}, {record.where or '-'}) {record.action} provider "
            f"{record.target}:\n" + "\n".join(lines) + "\n\nEvery prompt of its models, and the "
            "key read from its variable, now go there. If this was not meant, set it back and "
            "rotate the key."
        ),
        source="audit",
        details={
            "audit_record_id": record.id,
            "provider": record.target,
            "actor": record.actor,
            "changes": {f: record.changes[f] for f in ENDPOINT_FIELDS if f in record.changes},
        },
    )
