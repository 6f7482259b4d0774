import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models


class LlmJob(models.Model):
    """One LLM call run in the background. Its row is the source of truth for its state."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        RETRYING = "retrying", "Retrying"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    FINAL_STATUSES = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)
    WAITING_STATUSES = (Status.QUEUED, Status.RETRYING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    feature = models.SlugField(max_length=64)
    model = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)

    # The request, as the provider will receive it.
    messages = models.JSONField()
    system = models.JSONField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField()
    temperature = models.FloatField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64)

    attempts = models.PositiveIntegerField(default=0, help_text="Provider attempts, all time.")
    budget_attempts = models.PositiveIntegerField(
        default=0, help_text="Attempts since the last requeue; bounded by LLM_MAX_ATTEMPTS."
    )
    retry_counts = models.JSONField(
        default=dict, blank=True, help_text="Retries used per failure class since the last requeue."
    )
    rq_job_id = models.CharField(max_length=64, blank=True)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    output_text = models.TextField(null=True, blank=True)
    stop_reason = models.CharField(max_length=40, blank=True)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_creation_input_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_read_input_tokens = models.PositiveIntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal("0"))

    error_code = models.CharField(max_length=40, blank=True)
    error_http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error_message = models.TextField(blank=True)
    error_severity = models.CharField(max_length=10, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["user", "-created_at"], name="job_user_created"),
            models.Index(fields=["status", "next_attempt_at"], name="job_status_next"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "idempotency_key"], name="unique_idempotency_key_per_user"
            )
        ]
        verbose_name = "LLM job"

    def __str__(self) -> str:
        return f"{self.feature}/{self.model} {self.id} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL_STATUSES

    @property
    def duration_ms(self) -> int | None:
        if self.started_at is None or self.completed_at is None:
            return None
        return int((self.completed_at - self.started_at).total_seconds() * 1000)

    def provider_request(self) -> dict:
        """The Messages API body sent for this job."""
        body: dict = {"model": self.model, "max_tokens": self.max_tokens, "messages": self.messages}
        if self.system is not None:
            body["system"] = self.system
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body
