"""The audit trail: one row per change of the settings that move money or open doors
(providers, prices, budgets, feature policies, API keys), whoever made it and from where."""

from django.db import models


class AuditRecord(models.Model):
    """Who changed what, when, from where, with the fields before and after. Append-only: the
    admin shows the rows and offers no change or delete; a later change is a later row.

    The actor is kept by id and by name (not a foreign key): the record outlives a deleted
    user or key and never blocks deleting one."""

    class Source(models.TextChoices):
        ADMIN = "admin", "Admin"
        API = "api", "API"
        COMMAND = "command", "Command"
        SYSTEM = "system", "System"

    class Action(models.TextChoices):
        CREATED = "created", "created"
        CHANGED = "changed", "changed"
        DELETED = "deleted", "deleted"
        ROTATED = "rotated", "rotated"
        REVOKED = "revoked", "revoked"

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    source = models.CharField(max_length=10, choices=Source.choices)
    actor = models.CharField(
        max_length=200, help_text="The user (and key) or the command that made the change."
    )
    actor_user_id = models.IntegerField("user id", null=True, blank=True, db_index=True)
    actor_api_key_id = models.IntegerField("API key id", null=True, blank=True)
    where = models.CharField(
        max_length=300, blank=True, help_text="The request (method and path) or the command."
    )
    action = models.CharField(max_length=10, choices=Action.choices)
    target_type = models.CharField(max_length=60, db_index=True)
    target_id = models.CharField(max_length=64)
    target = models.CharField(max_length=200, help_text="The changed row, as it names itself.")
    changes = models.JSONField(
        default=dict, help_text="Each changed field: [before, after] (null where none)."
    )

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id", "-at"], name="audit_target")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target}"
