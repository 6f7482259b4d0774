from django.conf import settings
from django.db import models


class Severity(models.TextChoices):
    WARNING = "WARNING", "Warning"
    ERROR = "ERROR", "Error"
    CRITICAL = "CRITICAL", "Critical"


class FailureRecord(models.Model):
    """A dead-lettered job: why it failed, how bad it is, and what staff did about it."""

    class State(models.TextChoices):
        OPEN = "open", "Open"
        REQUEUED = "requeued", "Requeued"
        RESOLVED = "resolved", "Resolved"
        IGNORED = "ignored", "Ignored"

    job = models.ForeignKey("jobs.LlmJob", on_delete=models.PROTECT, related_name="failures")
    severity = models.CharField(max_length=10, choices=Severity.choices, db_index=True)
    reason_code = models.CharField(max_length=40, db_index=True)
    retries_exhausted = models.BooleanField(default=False)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error_type = models.CharField(max_length=60, blank=True)
    message = models.TextField(blank=True)
    request_id = models.CharField(max_length=100, blank=True)
    attempts = models.PositiveIntegerField()
    request_snapshot = models.JSONField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    handled_at = models.DateTimeField(null=True, blank=True)
    handled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    comment = models.TextField(blank=True)
    requeued_model = models.CharField(
        max_length=100, blank=True, help_text="The model the job was requeued with, if changed."
    )

    class Meta:
        ordering = ["-created_at"]
        permissions = [
            ("requeue_failurerecord", "Can requeue dead-lettered jobs"),
            ("requeue_other_model_failurerecord", "Can requeue dead-lettered jobs on another model"),
            ("requeue_matching_failurerecord", "Can requeue every dead-lettered job in a filter"),
            ("resolve_failurerecord", "Can resolve dead-lettered jobs"),
            ("ignore_failurerecord", "Can ignore dead-lettered jobs"),
        ]
        indexes = [models.Index(fields=["state", "-created_at"], name="failure_state_created")]
        verbose_name = "failure (DLQ)"
        verbose_name_plural = "failures (DLQ)"

    def __str__(self) -> str:
        return f"{self.severity} {self.reason_code} job {self.job_id}"
