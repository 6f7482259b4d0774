import uuid

from django.conf import settings
from django.db import models

from alerts.targets import CALLBACK, redact_target

JOB_MARKER_KEY = "llmops_webhook"
"""Set in a job's metadata when it has a callback URL: only a hint (its ``WebhookSubscription``
decides), so that the final transitions of jobs without one cost no query
(webhooks/job_events.py)."""


class Subject(models.TextChoices):
    """What a webhook is about."""

    JOB = "job", "Job"
    AGENT_RUN = "agent_run", "Agent run"
    BATCH = "batch", "Batch"


class WebhookDelivery(models.Model):
    """One event POSTed to a caller's URL (webhooks/services.py): the log row is the truth.

    Recorded in the transaction that made the event (a job's final transition, a run's or a
    batch's finish), so it exists exactly when the event does; every attempt is kept here and
    the monitor sends again any pending one whose RQ job was lost. The URL is a secret (a token
    may sit in its path or query): the admin and the logs show only its host."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    event_id = models.UUIDField(
        default=uuid.uuid4, unique=True, editable=False, help_text="LLM-Webhook-Id."
    )
    subject_kind = models.CharField(max_length=20, choices=Subject.choices)
    subject_id = models.CharField(max_length=64)
    event = models.CharField(max_length=40, help_text="The body's type, e.g. job.completed.")
    url = models.CharField(max_length=500, help_text="A secret: shown redacted.")
    signer = models.CharField(
        max_length=100, help_text="Whose signing secret signs it: key:<id> or feature:<slug>."
    )
    payload = models.JSONField(help_text="The body POSTed.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    round_start = models.PositiveIntegerField(
        default=0, help_text="Attempts made before the current round (a 'deliver again')."
    )
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    history = models.JSONField(
        default=list, blank=True, help_text="Every attempt: {attempt, at, ok, status, error, ms}."
    )
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="When the pending attempt is due; empty once final."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [
            # The monitor's sweep for pending deliveries whose RQ job was lost.
            models.Index(fields=["state", "next_attempt_at"], name="webhook_due"),
            models.Index(fields=["subject_kind", "subject_id"], name="webhook_subject"),
        ]
        permissions = [("redeliver_webhookdelivery", "Can deliver a webhook again")]

    def __str__(self) -> str:
        return f"{self.event} of {self.subject_kind} {self.subject_id} ({self.state})"

    @property
    def url_redacted(self) -> str:
        return redact_target(kind=CALLBACK, target=self.url)


class WebhookSubscription(models.Model):
    """A job's or an agent run's ``callback_url``, from its submit on: each final state it
    reaches is POSTed there (a requeued job reaches one again)."""

    subject_kind = models.CharField(max_length=20, choices=Subject.choices)
    subject_id = models.CharField(max_length=64)
    url = models.CharField(max_length=500, help_text="A secret: shown redacted.")
    signer = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["subject_kind", "subject_id"], name="unique_webhook_subscription"
            )
        ]

    def __str__(self) -> str:
        return f"callback of {self.subject_kind} {self.subject_id}"


class WebhookSigningSecret(models.Model):
    """The generation of an owner's signing secret (an API key, a feature). The secret itself is
    derived from the server's signing key (webhooks/signing.py), never stored; an owner without
    a row is at generation 0. A roll moves to the next generation and keeps the previous one
    signing beside it until ``previous_valid_until``."""

    owner = models.CharField(max_length=100, unique=True)
    generation = models.PositiveIntegerField(default=0)
    rolled_at = models.DateTimeField(null=True, blank=True)
    rolled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    previous_valid_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["owner"]

    def __str__(self) -> str:
        return f"{self.owner} generation {self.generation}"
