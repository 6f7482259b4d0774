"""Deferred jobs' provider message batches: one ``ProviderBatch`` per batch sent to a provider's
Message Batches API, one ``ProviderBatchItem`` per job attempt in it (``custom_id`` = job id)."""

from django.db import models


class ProviderBatch(models.Model):
    """A batch at the provider: created by the deferred loop from waiting deferred jobs of one
    model, polled until it ends, its results booked job by job."""

    class Status(models.TextChoices):
        UNSENT = "unsent", "Claimed, not yet confirmed sent"
        IN_PROGRESS = "in_progress", "In progress"
        CANCELING = "canceling", "Canceling"
        ENDED = "ended", "Ended (results being read)"
        BOOKED = "booked", "Booked (every result read)"

    provider = models.CharField(max_length=40)
    model = models.CharField(max_length=100)
    provider_batch_id = models.CharField(max_length=100, unique=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.IN_PROGRESS)
    request_counts = models.JSONField(default=dict, blank=True)
    items_total = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    booked_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(
        null=True, blank=True, help_text="Every job of it moved on: the batch was cancelled."
    )
    last_polled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "last_polled_at"], name="provider_batch_poll")]
        verbose_name = "provider batch"
        verbose_name_plural = "provider batches"

    def __str__(self) -> str:
        return f"{self.provider_batch_id} ({self.model}, {self.status})"


class ProviderBatchItem(models.Model):
    """One job attempt sent in a provider batch. Its result is booked once (``booked_at``): to
    the job when the job still waits for it, else as a superseded row (it was paid)."""

    batch = models.ForeignKey(ProviderBatch, on_delete=models.PROTECT, related_name="items")
    job = models.ForeignKey("jobs.LlmJob", on_delete=models.PROTECT, related_name="+")
    attempt = models.PositiveIntegerField()
    result_type = models.CharField(max_length=12, blank=True)
    booked_at = models.DateTimeField(null=True, blank=True)
    moved_to_real_time = models.BooleanField(
        default=False, help_text="Its job went to real time while the batch ran (its deadline)."
    )
    superseded = models.BooleanField(
        default=False,
        help_text="The job had moved on (real time, cancelled) when its result was booked.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="one_batch_item_per_attempt")
        ]
        indexes = [models.Index(fields=["batch", "booked_at"], name="batch_item_booked")]

    def __str__(self) -> str:
        return f"{self.batch_id}: job {self.job_id} attempt {self.attempt}"
