from django.core.exceptions import ValidationError
from django.db import models

from alerts import targets
from jobs.models import Severity

__all__ = [
    "Alert",
    "AlertDelivery",
    "AlertFingerprint",
    "AlertKind",
    "AlertRoute",
    "LoopHeartbeat",
    "Severity",
]


class AlertKind(models.TextChoices):
    SLACK = targets.SLACK, "Slack incoming webhook"
    PAGERDUTY = targets.PAGERDUTY, "PagerDuty Events API v2"
    WEBHOOK = targets.WEBHOOK, "Generic JSON webhook"
    EMAIL = targets.EMAIL, "Email"


class AlertRoute(models.Model):
    """One destination for the alerts of one severity, edited by staff in the admin.

    A severity with no row at all (enabled or not) falls back to ``settings.ALERT_ROUTES``;
    disabling every row of a severity is how staff silence it.
    """

    name = models.CharField(max_length=100, blank=True)
    severity = models.CharField(max_length=10, choices=Severity.choices, db_index=True)
    kind = models.CharField(max_length=10, choices=AlertKind.choices)
    target = models.CharField(
        max_length=500,
        help_text=(
            "slack/webhook: the URL; pagerduty: the integration's routing key; "
            "email: comma-separated addresses. A secret: shown redacted everywhere else."
        ),
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["severity", "kind", "id"]

    def __str__(self) -> str:
        redacted = targets.redact_target(kind=self.kind, target=self.target)
        label = self.name or f"{self.kind} {redacted}"
        return f"{self.severity}: {label}"

    def clean(self) -> None:
        # An unknown kind is already reported on the kind field by its choices.
        if self.kind not in targets.KINDS:
            return
        # Stored stripped, as ALERT_ROUTES stores its targets.
        self.target = (self.target or "").strip()
        problem = targets.target_problem(kind=self.kind, target=self.target)
        if problem:
            raise ValidationError({"target": problem})


class AlertFingerprint(models.Model):
    """Deduplication and condition state of one fingerprint.

    Exactly one row per fingerprint; services lock it with ``select_for_update`` so that
    concurrent workers agree on whether an occurrence is sent or folded.
    """

    fingerprint = models.CharField(max_length=255, unique=True)
    severity = models.CharField(max_length=10, choices=Severity.choices)
    last_alert = models.ForeignKey(
        "Alert", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_sent_at = models.DateTimeField(null=True, blank=True)
    folded_count = models.PositiveIntegerField(
        default=0, help_text="Occurrences folded since the last alert was sent."
    )
    last_seen_at = models.DateTimeField(null=True, blank=True)
    active = models.BooleanField(
        default=False,
        help_text=(
            "Triggered and not yet resolved: a queue-health condition, or a failure fingerprint "
            "with DLQ records still open."
        ),
    )

    def __str__(self) -> str:
        return self.fingerprint


class Alert(models.Model):
    """One notification that was (or is being) sent: a trigger, or the resolve of a condition."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        PARTIAL = "partial", "Partly failed"
        FAILED = "failed", "Failed"
        UNROUTED = "unrouted", "No destination"

    class Action(models.TextChoices):
        TRIGGER = "trigger", "Trigger"
        RESOLVE = "resolve", "Resolve"

    fingerprint = models.CharField(max_length=255, db_index=True)
    severity = models.CharField(max_length=10, choices=Severity.choices, db_index=True)
    action = models.CharField(max_length=10, choices=Action.choices, default=Action.TRIGGER)
    source = models.CharField(max_length=20, help_text="failure or queue_health")
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)
    failure = models.ForeignKey(
        "dlq.FailureRecord", null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts"
    )
    destinations = models.JSONField(
        default=list, blank=True, help_text="Where it went, redacted: [{kind, target}]."
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0, help_text="Delivery attempts, all told.")
    last_error = models.TextField(blank=True)
    folded_count = models.PositiveIntegerField(
        default=0, help_text="Similar occurrences folded in since the previous alert."
    )
    folded_since = models.DateTimeField(null=True, blank=True)
    repeat_count = models.PositiveIntegerField(
        default=0, help_text="Later occurrences folded into this alert (not sent)."
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.severity} {self.action} {self.title}"


class AlertDelivery(models.Model):
    """One alert to one destination; retried on its own so that one failure blocks no other."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    route = models.ForeignKey(
        AlertRoute, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    kind = models.CharField(max_length=10, choices=AlertKind.choices)
    # Stored as configured (a resolve must reach the same PagerDuty key); never logged.
    target = models.CharField(max_length=500)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    history = models.JSONField(
        default=list, blank=True, help_text="Every attempt: {attempt, at, ok, error, ms}."
    )
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="When the pending attempt is due; empty once final."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "alert deliveries"
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="alertdelivery_due")]

    def __str__(self) -> str:
        return f"{self.kind} {targets.redact_target(kind=self.kind, target=self.target)}"


class LoopHeartbeat(models.Model):
    """When a long-running loop command (reconciler, monitor, ...) last finished a pass.

    Each loop writes its own row after every pass; the loop health check (loops/loop_health.py)
    raises an ERROR alert for a loop that has not passed for three of its intervals, and resolves
    it once it passes.
    """

    name = models.CharField(max_length=64, unique=True)
    interval_seconds = models.FloatField()
    last_pass_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    host = models.CharField(max_length=255, blank=True, help_text="host:pid of the last pass.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
