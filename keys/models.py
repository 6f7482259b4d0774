from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiKey(models.Model):
    """A user's credential for the API, as providers issue them: named, scoped, expiring,
    revocable, with its own budget and submit rate. The secret itself is never stored: its
    keyed hash is, in ``ApiKeySecret`` (two of them while a rotation's grace period runs).

    Never deleted (jobs and ledger rows point at it); revoked instead."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(
        max_length=16, help_text="The start of the current secret, to tell keys apart."
    )
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never.")
    last_used_at = models.DateTimeField(
        null=True, blank=True, help_text="Written at most once a minute."
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    rpm = models.PositiveIntegerField(
        null=True, blank=True, help_text="Submissions per minute; empty: only the user's rate."
    )
    parent = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="children",
        help_text="The key that minted this one through the API: its budget holds this key's "
        "spend too.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"], name="api_key_user_created")]
        permissions = [("revoke_apikey", "Can revoke any API key")]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (
            self.expires_at is None or self.expires_at > timezone.now()
        )


class ApiKeySecret(models.Model):
    """One secret of a key, by its hash. A rotation adds the new secret and gives the old one
    ``expires_at`` (the end of its grace period); revoking the key ends all of them."""

    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="secrets")
    secret_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="The end of a rotated secret's grace period."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key secret"

    def __str__(self) -> str:
        return f"{self.prefix}... of key {self.key_id}"
