"""The dead-letter queue: one ``FailureRecord`` per dead-lettered job, and the bulk requeues
staff start over a selection of them. Both tables kept their names from the alerts app."""

from django.conf import settings
from django.db import models

from jobs.models import Severity

__all__ = ["BulkRequeue", "FailureRecord"]


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
    alerted_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its alert was sent or folded into the open one; empty: not alerted yet.",
    )
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
            (
                "requeue_other_model_failurerecord",
                "Can requeue dead-lettered jobs on another model",
            ),
            ("requeue_matching_failurerecord", "Can requeue every dead-lettered job in a filter"),
            ("resolve_failurerecord", "Can resolve dead-lettered jobs"),
            ("ignore_failurerecord", "Can ignore dead-lettered jobs"),
        ]
        indexes = [
            models.Index(fields=["state", "-created_at"], name="failure_state_created"),
            # The monitor's sweep looks for the few records still unalerted, on every pass.
            models.Index(fields=["alerted_at", "created_at"], name="failure_unalerted"),
        ]
        db_table = "alerts_failurerecord"  # moved from alerts/ with its table
        verbose_name = "failure (DLQ)"
        verbose_name_plural = "failures (DLQ)"

    def __str__(self) -> str:
        return f"{self.severity} {self.reason_code} job {self.job_id}"


class BulkRequeue(models.Model):
    """One "requeue all matching" over a DLQ selection, run as a background job on the default
    queue in bounded batches, with its progress shown in the admin."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        FINISHED = "finished", "Finished"
        FAILED = "failed", "Failed"

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    description = models.CharField(max_length=500, blank=True, help_text="The filter, as shown.")
    model = models.CharField(max_length=100, blank=True, help_text="Requeue on this model.")
    record_ids = models.JSONField(default=list, help_text="The open records selected.")
    total = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    moved = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    last_error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "alerts_bulkrequeue"  # moved from alerts/ with its table
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"bulk requeue {self.id} ({self.processed}/{self.total})"

    @property
    def percent(self) -> int:
        return 100 if not self.total else int(self.processed * 100 / self.total)
